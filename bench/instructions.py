"""Instructions per lone request, counted by valgrind: the host path's measure that does not move.

Why: on a shared VM a lone request's CPU time moves 20-30 % between identical runs (and the whole
machine 1.7x within an hour), so a change worth 5-10 % of it cannot be seen in seconds. Callgrind
counts the instructions the process executes instead: the same for the same code, inputs and
environment, whatever the machine is doing (repeatable here to 0.5 %).

What is counted: the server's ASGI app driven in one process (no sockets, so uvicorn's own parsing is
left out and the app is what is measured): a lone 10-word msgpack encode on the near-free model
(``random_models.TINY``), ``--requests`` times after a warm-up, every thread included (the device
thread's forward too). Instrumentation is switched on only around those requests
(``callgrind_control -i on``), so start-up and imports cost nothing. Targets: the floor (the
tokenizer, our packed forward and pooling, one thread, no server), ours (this checkout),
``--before TREE`` (an earlier commit's ``src``), and ``--lean``: ``bench.lean_server``'s app, the
floor plus what any asyncio front end must do (decode, one hand-off to a device thread, encode).

    python -m bench.instructions --before /tmp/before --lean
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from bench import corpus, random_models, servers

QUERY: Final = "what is the capital city of france and why"
WARM_UP: Final = 300
_ROOT: Final = Path(__file__).resolve().parent.parent
_TOTAL: Final = re.compile(r"^totals: (\d+)", re.MULTILINE)

App = Callable[
    [dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]
]


def _app(target: str, built: Path, models: Path) -> App:
    if target == "lean":
        from bench.lean_server import build_app

        return build_app(built)  # type: ignore[no-any-return]
    os.environ.update(
        SIE_MODELS_DIR=str(models), SIE_PRELOAD_MODELS=random_models.model_id(random_models.TINY)
    )
    os.environ["SIE_DEFAULT_COMPUTE_PRECISION"] = "float32"
    from sie.server.app import create_app
    from sie.settings.server import Settings

    settings: Any = Settings  # the variables are read from the environment set above
    return create_app(settings())


async def drive(
    app: App, model: str, requests: int, between: Callable[[str], None], warm_up: int = WARM_UP
) -> int:
    """The app's lifespan, ``warm_up`` requests, ``between("on")``, ``requests`` requests,
    ``between("off")``; every answer must be a 200. Returns the requests answered."""
    import msgpack

    state: dict[str, Any] = {}
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    lifespan = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": state}

    async def run_lifespan() -> None:
        await app(lifespan, inbox.get, outbox.put)

    life = asyncio.create_task(run_lifespan())
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        raise RuntimeError(f"the app did not start: {started}")
    body = msgpack.packb({"items": [{"text": QUERY}]})
    path = f"/v1/encode/{model}"
    headers = [
        (b"host", b"bench"),
        (b"content-type", b"application/msgpack"),
        (b"accept", b"application/msgpack"),
        (b"content-length", str(len(body)).encode()),
    ]

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def one() -> None:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8080),
            "state": dict(state),
        }
        await app(scope, receive, send)
        if not sent or sent[0].get("status") != 200:
            raise RuntimeError(f"a request was not answered 200: {sent[:1]}")

    for _ in range(warm_up):
        await one()
    between("on")
    for _ in range(requests):
        await one()
    between("off")
    await inbox.put({"type": "lifespan.shutdown"})
    await life
    return requests


def thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each of this process's threads, by thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    spent: dict[int, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        spent[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return spent


def _child(argv: list[str]) -> None:
    """Runs inside valgrind (or alone: ``--plain``, with no warm-up, a check that it runs; ``--cpu``,
    each thread's CPU read from /proc around the load, printed as one JSON line): one target's app,
    instrumented around the load."""
    import uvloop

    target, built, models, requests = argv[0], Path(argv[1]), Path(argv[2]), int(argv[3])
    plain, cpu = "--plain" in argv, "--cpu" in argv
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    before: dict[int, float] = {}

    def between(switch: str) -> None:
        if cpu:
            now = thread_cpu()
            if switch == "on":
                before.update(now)
                return
            loop = (now.get(os.getpid(), 0.0) - before.get(os.getpid(), 0.0)) / requests
            rest = sum(now.values()) - sum(before.values()) - loop * requests
            print(json.dumps({"loop_us": loop * 1e6, "other_threads_us": rest / requests * 1e6}))
        elif not plain:
            subprocess.run(
                ["callgrind_control", "-i", switch, str(os.getpid())], check=True, capture_output=True
            )

    if target == "floor":
        _floor(built, requests, between, 0 if plain else WARM_UP)
        return
    app = _app(target, built, models)
    model = random_models.model_id(random_models.TINY)
    uvloop.run(drive(app, model, requests, between, 0 if plain else WARM_UP))


def _floor(built: Path, requests: int, between: Callable[[str], None], warm_up: int) -> None:
    """What no server can skip, on one thread: the tokenizer and our packed forward and pooling
    (``bench.host_path``'s floor pipeline) for the same query."""
    from bench.lean_server import load

    encoder, runner = load(built)
    from bench.packed_ab import FORWARD, GROUP

    for _ in range(warm_up):
        runner.run(encoder.prepare([QUERY], FORWARD), [GROUP])
    between("on")
    for _ in range(requests):
        runner.run(encoder.prepare([QUERY], FORWARD), [GROUP])
    between("off")


def _child_command(
    target: str, src: Path | None, built: random_models.BuiltModel, requests: int
) -> tuple[list[str], dict[str, str]]:
    """The child's command line and environment for one target: ``src`` (an earlier tree) first on
    the path, none of this shell's SIE_* variables."""
    env = servers.offline_env({"TOKENIZERS_PARALLELISM": "false"})
    paths = [str(src)] if src is not None else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    argv = [sys.executable, "-m", "bench.instructions", "--child", "sie" if target == "before" else target]
    return [*argv, str(built.folder), str(built.yaml_path.parent), str(requests)], env


def count(target: str, src: Path | None, built: random_models.BuiltModel, requests: int, out: Path) -> float:
    """Instructions per request of ``target`` (``floor``, ``ours``, ``before`` or ``lean``) under
    callgrind."""
    child, env = _child_command(target, src, built, requests)
    result = out / f"callgrind.{target}"
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={result}", *child]
    log = out / f"callgrind.{target}.log"
    with log.open("wb") as sink:
        subprocess.run(argv, env=env, stdout=sink, stderr=subprocess.STDOUT, check=True, timeout=1800)
    match = _TOTAL.search(result.read_text(errors="replace"))
    if match is None:
        raise RuntimeError(f"callgrind wrote no total; its log: {log}")
    return int(match.group(1)) / requests


def thread_times(
    target: str, src: Path | None, built: random_models.BuiltModel, requests: int
) -> dict[str, float]:
    """CPU per lone request of ``target`` in process, on the event loop's thread and on every other
    thread together (the device thread, pools, OpenMP): seconds, not valgrind's minutes, but as noisy
    as the machine (read the loop's share against another target's in the same run)."""
    child, env = _child_command(target, src, built, requests)
    done = subprocess.run(
        [*child, "--cpu"], env=env, capture_output=True, text=True, check=True, timeout=1800
    )
    measured: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--child"]:
        _child(args_in[1:])
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--requests",
        type=int,
        default=None,
        help="lone requests counted per target (200; 6000 with --threads)",
    )
    p.add_argument(
        "--before", type=Path, default=None, metavar="TREE", help="an earlier checkout, beside ours"
    )
    p.add_argument("--lean", action="store_true", help="also bench.lean_server's app: the yardstick")
    p.add_argument("--log-dir", type=Path, default=None)
    p.add_argument(
        "--threads",
        action="store_true",
        help="no valgrind: each target's CPU per lone request on the loop and on other threads (/proc)",
    )
    args = p.parse_args(args_in)
    if args.requests is None:  # /proc counts 10 ms ticks: thousands of requests resolve microseconds
        args.requests = 6000 if args.threads else 200
    out = Path(args.log_dir or tempfile.mkdtemp(prefix="sie-instructions-"))
    built = random_models.build([random_models.TINY], corpus.default_model_folder(), out / "models")[0]
    targets: list[tuple[str, Path | None]] = [("floor", None), ("ours", None)]
    if args.before is not None:
        targets.insert(0, ("before", args.before / "src"))
    if args.lean:
        targets.append(("lean", None))
    if args.threads:
        print(f"CPU per lone msgpack encode in process ({args.requests} requests, us):")
        for name, src in targets:
            times = thread_times(name, src, built, args.requests)
            loop, other = times["loop_us"], times["other_threads_us"]
            print(f"  {name:<7} loop {loop:7.1f}  other threads {other:7.1f}  all {loop + other:7.1f}")
        return 0
    counted = {name: count(name, src, built, args.requests, out) for name, src in targets}
    print(f"Instructions per lone msgpack encode (callgrind, {args.requests} requests, every thread):")
    for name, per in counted.items():
        versus = [f"{per / counted[other]:.2f}x {other}" for other in counted if other != name]
        above = f"{(per - counted['floor']) / 1e6:6.3f} M above the floor" if name != "floor" else ""
        print(f"  {name:<7} {per / 1e6:6.3f} M  {above:<26} {', '.join(versus)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
