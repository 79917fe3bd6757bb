"""AWS backend: one DynamoDB table (single-table design) and one S3 bucket."""

from storage.aws.provision import create_resources
from storage.aws.store import AwsStore

__all__ = ["AwsStore", "create_resources"]
