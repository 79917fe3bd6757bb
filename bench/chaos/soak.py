"""The soak: start what stays up for the whole soak (storage emulators behind fault proxies,
the Slack stand-in behind its fault layer, the scripted model server), then per backend the
bot replicas, and play the runs one after the other. Bot processes live across runs; they
are restarted only as a fault or when found dead. SIGTERM or SIGINT ends the soak after the
run in progress (its table covers the runs made); a second one stops it at once, its
processes stopped all the same."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from aiohttp import web

from bench.chaos.facts import KeyedLog
from bench.chaos.faults import Cluster, Injector, Targets
from bench.chaos.model import ModelServer
from bench.chaos.plan import FAMILIES, make_plan
from bench.chaos.processes import KEYED_LATE, ROOT, Replica, bot_environment
from bench.chaos.run import Run, RunResult
from bench.chaos.slack import SlackSide
from storage import ConversationKey, StorageSettings, open_store
from testkit.faultproxy import FaultProxy
from testkit.keyed_service import keyed_service
from testkit.services import aws_environment, dynamodb_local, environment, free_port, moto_s3


@dataclass
class SoakOptions:
    runs: int
    backends: list[str]
    seed: int
    replicas: str = "auto"
    families: tuple[str, ...] = FAMILIES
    out: Path = ROOT / "test-artifacts" / "chaos"
    lease_seconds: float = 2.0
    transfer_delay: float = 0.8
    verbose: bool = True
    until: float | None = None  # epoch seconds: start no run after it (a time-boxed soak)


@dataclass
class Backend:
    name: str
    storage_env: dict[str, str]  # for the bot processes (storage through the proxies)
    settings: StorageSettings  # for the harness (storage directly)
    data_dir: Path | None = None


async def soak(options: SoakOptions) -> tuple[list[RunResult], dict[str, Any]]:
    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-s{options.seed}"
    out = options.out / stamp
    out.mkdir(parents=True, exist_ok=True)
    results: list[RunResult] = []
    timing: dict[str, Any] = {"replica_starts": [], "replica_exits": []}
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_stopped_by_signals(options))
        proxies: dict[str, FaultProxy] = {}
        if "aws" in options.backends:
            # Started side by side (each waits seconds for its process to answer); each
            # one started is stopped with the stack, whether or not the other started.
            with ThreadPoolExecutor(2) as pool:
                dynamodb = pool.submit(stack.enter_context, dynamodb_local())
                s3 = pool.submit(stack.enter_context, moto_s3())
                dynamodb_url, s3_url = dynamodb.result(), s3.result()
            stack.enter_context(environment(aws_environment(dynamodb_url, s3_url)))
            proxies["dynamodb"] = stack.enter_context(
                FaultProxy(dynamodb_url, "dynamodb", seed=options.seed)
            )
            proxies["s3"] = stack.enter_context(FaultProxy(s3_url, "s3", seed=options.seed))
        slack = SlackSide()
        model = ModelServer()
        keyed = stack.enter_context(_keyed_service(model))
        await slack.start(free_port())
        model_runner, model_url = await _serve_model(model)
        try:
            for name in options.backends:
                backend = _backend(name, out, proxies)
                results += await _soak_backend(
                    options, backend, slack, model, model_url, proxies, out, timing, keyed
                )
        finally:
            await slack.stop()
            await model_runner.cleanup()
    timing["total_seconds"] = time.monotonic() - began
    timing["out"] = str(out)
    return results, timing


@contextlib.contextmanager
def _stopped_by_signals(options: SoakOptions) -> Iterator[None]:
    """SIGTERM and SIGINT end the soak after the run in progress; a second stops it now."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    stops = (signal.SIGTERM, signal.SIGINT)
    for stop in stops:
        loop.add_signal_handler(stop, _stop_soon(options, task))
    try:
        yield
    finally:
        for stop in stops:
            loop.remove_signal_handler(stop)


def _stop_soon(options: SoakOptions, task: asyncio.Task[Any]) -> Callable[[], None]:
    def stop() -> None:
        if options.until is not None and options.until <= time.time():
            print("[chaos] stopping now", flush=True)
            task.cancel()  # the replicas and services are still stopped on the way out
            return
        options.until = time.time()
        print("[chaos] stopping after this run (signal again to stop now)", flush=True)

    return stop


async def _soak_backend(
    options: SoakOptions,
    backend: Backend,
    slack: SlackSide,
    model: ModelServer,
    model_url: str,
    proxies: dict[str, FaultProxy],
    out: Path,
    timing: dict[str, Any],
    keyed: tuple[str, KeyedLog],
) -> list[RunResult]:
    ledger = out / f"ledger-{backend.name}.jsonl"
    mcp_effects = out / f"mcp-effects-{backend.name}.jsonl"
    keyed_url, keyed_log = keyed
    store = open_store(backend.settings)
    if backend.name == "aws":
        assert backend.settings.table and backend.settings.bucket
        from storage.aws import create_resources

        create_resources(backend.settings.table, backend.settings.bucket)
    replicas = []
    for slot in range(2):
        port = free_port()
        env = bot_environment(
            port=port,
            slack_url=slack.url,
            model_url=model_url,
            storage=backend.storage_env,
            ledger=ledger,
            transfer_delay=options.transfer_delay,
            lease_seconds=options.lease_seconds,
            keyed_url=keyed_url,
            mcp_effects=mcp_effects,
        )
        replicas.append(Replica(slot, port, env, out / f"{backend.name}-replica{slot}.log"))
    cluster = Cluster(replicas)
    list_blobs = _blob_lister(backend)
    results: list[RunResult] = []

    def injector(note: Any, targets: Targets) -> Injector:
        return Injector(
            targets=targets,
            cluster=cluster,
            slack=slack,
            model=model,
            proxies=proxies if backend.name == "aws" else {},
            data_dir=backend.data_dir,
            note=note,
        )

    try:
        for number in range(options.runs):
            if options.until is not None and time.time() >= options.until:
                print(f"[chaos] {backend.name}: time is up after {number} runs", flush=True)
                break
            seed = options.seed + number
            plan = make_plan(
                seed, backend.name, replicas=options.replicas, families=options.families
            )
            run = Run(
                plan,
                slack=slack,
                model=model,
                cluster=cluster,
                injector_factory=injector,
                store=store,
                ledger=ledger,
                list_blobs=list_blobs,
                history=out / f"{backend.name}-seed{seed}.jsonl",
                mcp_effects=mcp_effects,
                keyed=keyed_log,
            )
            result = await run.execute()
            results.append(result)
            if options.verbose:
                kinds = sorted({v.kind for v in result.violations})
                print(
                    f"[chaos] {backend.name} seed {seed} replicas {plan.replicas} "
                    f"faults {','.join(result.fault_kinds)}: {result.seconds:.1f}s, "
                    f"{len(result.violations)} violation(s) {' '.join(kinds)}"
                    + ("" if result.quiet else " (never quiet)")
                    + (f" HARNESS ERROR {result.error}" if result.error else ""),
                    flush=True,
                )
    finally:
        await cluster.shutdown()
        store.close()
        timing["replica_starts"] += cluster.start_seconds
        timing["replica_exits"] += cluster.exit_seconds
    return results


def _backend(name: str, out: Path, proxies: dict[str, FaultProxy]) -> Backend:
    if name == "local":
        data_dir = out / "local-data"
        return Backend(
            name,
            {"BOT_STORAGE": "local", "BOT_DATA_DIR": str(data_dir)},
            StorageSettings(storage="local", data_dir=data_dir),
            data_dir,
        )
    suffix = uuid.uuid4().hex[:8]
    table, bucket = f"chaos-{suffix}", f"chaos-{suffix}"
    env = {
        "BOT_STORAGE": "aws",
        "BOT_TABLE": table,
        "BOT_BUCKET": bucket,
        **aws_environment(proxies["dynamodb"].url, proxies["s3"].url),
    }
    return Backend(name, env, StorageSettings(storage="aws", table=table, bucket=bucket))


def _blob_lister(backend: Backend) -> Any:
    if backend.name == "local":
        assert backend.data_dir is not None
        root = backend.data_dir / "blobs"

        def local(key: ConversationKey) -> list[str]:
            folder = root / "checkpoints" / key.path
            return sorted(str(p.relative_to(root)) for p in folder.glob("*.json.gz"))

        return local
    s3 = boto3.client("s3")
    bucket = backend.settings.bucket
    assert bucket is not None

    def aws(key: ConversationKey) -> list[str]:
        found = s3.list_objects_v2(Bucket=bucket, Prefix=f"checkpoints/{key.path}/")
        return sorted(str(o["Key"]) for o in found.get("Contents", []))

    return aws


async def _serve_model(model: ModelServer) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.add_routes(model.routes())
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def _keyed_service(model: ModelServer) -> Iterator[tuple[str, KeyedLog]]:
    """The keyed service the soak's `charge` calls (in this process, outside every bot
    process), and a log of each request it got, timed: which call (its `what`), which key,
    and whether the key was applied before (answered with the first result). A call the
    model made slow (`ModelServer.slow_calls`) is answered `KEYED_LATE` seconds after it
    was applied, the first time: after the tool's client gave up waiting."""
    log: KeyedLog = []
    with keyed_service() as service:
        apply = service.apply

        def timed(request: dict[str, Any]) -> dict[str, Any]:
            result = apply(request)
            log.append(
                {
                    "key": str(request.get("key")),
                    "call_id": str(request.get("what")),
                    "at": time.time(),
                    "repeated": bool(result.get("repeated")),
                }
            )
            if str(request.get("what")) in model.slow_calls and not result.get("repeated"):
                time.sleep(KEYED_LATE)  # (on the service's own thread of this request)
            return result

        service.apply = timed  # type: ignore[method-assign]
        yield service.url, log
