"""`open_store` under the module path that scripts outside the package were written against
(the defect reproductions import `storage.factory`); the code is in `storage.config`."""

from storage.config import open_store

__all__ = ["open_store"]
