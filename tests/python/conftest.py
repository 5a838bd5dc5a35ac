"""Fixtures that run the real `rkllmd` binary on the simulated backend.

Every test talks to a daemon process over loopback HTTP, through the official
`openai` package where it can and through raw `httpx` where the wire format
itself is under test.

Environment:
    RKLLMD_BIN       path to the daemon binary (default: <repo>/target/debug/rkllmd).
                     A missing binary is a test failure, never a skip.
    RKLLMD_TEST_LOG  log filter for the daemons (their RKLLMD_LOG), e.g. "debug".
The daemons get no other RKLLMD_* / RKLLM_SIM_* variable from the caller.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import httpx
import openai
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO_ROOT / "target" / "debug" / "rkllmd"

MODEL_ID = "test-model"
# Fast, deterministic default: 8 generated tokens per reply.
DEFAULT_SPEC = "sim:qwen2.5-1.5b?time_scale=0.05&reply_tokens=8"
REPLY_TOKENS = 8

# Arguments placed between the binary and the flags. Empty: `serve` is the
# default subcommand (`rkllmd --backend sim ...`).
SERVE_SUBCOMMAND: list[str] = []

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
HTTP_TIMEOUT_S = 30.0

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LISTENING = re.compile(r"listening on (http://[A-Za-z0-9.\-]+|http://\[[0-9A-Fa-f:]+\]):([1-9][0-9]*)")


def daemon_binary() -> Path:
    path = Path(os.environ.get("RKLLMD_BIN", str(DEFAULT_BIN)))
    if not path.is_file():
        pytest.fail(
            f"rkllmd binary not found at {path}. Build it first (`cargo build` at the repo root) "
            f"or point RKLLMD_BIN at it. These tests do not skip without the daemon.",
            pytrace=False,
        )
    if not os.access(path, os.X_OK):
        pytest.fail(f"rkllmd binary at {path} is not executable", pytrace=False)
    return path


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # The daemon reads RKLLMD_* from the environment (config < env < flags):
    # a developer's own RKLLMD_API_KEY etc. must not leak into the tests.
    # Likewise the simulator's RKLLM_SIM_* (seed, reply_tokens, script, ...).
    for key in list(env):
        if key.startswith(("RKLLMD_", "RKLLM_SIM_")):
            del env[key]
    env["NO_COLOR"] = "1"
    # The readiness line is logged at info level, the daemon's default filter.
    # RKLLMD_TEST_LOG (e.g. "debug") is passed on as the daemon's RKLLMD_LOG.
    if os.environ.get("RKLLMD_TEST_LOG"):
        env["RKLLMD_LOG"] = os.environ["RKLLMD_TEST_LOG"]
    return env


@dataclass
class Daemon:
    """One running daemon process."""

    args: list[str]
    proc: subprocess.Popen
    api_key: Optional[str] = None
    url: Optional[str] = None
    _lines: collections.deque = field(default_factory=lambda: collections.deque(maxlen=5000))
    _ready: threading.Event = field(default_factory=threading.Event)
    _reader: Optional[threading.Thread] = None
    _stopped: bool = False

    # -- output -------------------------------------------------------------
    def _read_output(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = _ANSI.sub("", raw.decode("utf-8", errors="replace")).rstrip("\n")
            self._lines.append(line)
            if self.url is None:
                m = _LISTENING.search(line)
                if m:
                    self.url = f"{m.group(1)}:{m.group(2)}"
                    self._ready.set()
        self._ready.set()  # EOF: the process is gone; wake the waiter.

    def output(self) -> str:
        return "\n".join(self._lines)

    def _describe(self) -> str:
        return (
            f"command: {' '.join(self.args)}\n"
            f"exit code: {self.proc.poll()}\n"
            f"--- captured output ---\n{self.output()}\n--- end ---"
        )

    # -- lifecycle ----------------------------------------------------------
    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        self._reader = threading.Thread(target=self._read_output, daemon=True)
        self._reader.start()
        self._ready.wait(timeout)
        if self.url is None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)
                reason = f"no 'listening on http://...' line within {timeout:.0f} s"
            else:
                reason = "the daemon exited before it was ready"
            self._reader.join(2)
            self._stopped = True
            pytest.fail(f"{reason}\n{self._describe()}", pytrace=False)

    def stop(self) -> None:
        """SIGTERM, then require a clean exit (code 0) within STOP_TIMEOUT_S."""
        if self._stopped:
            return
        self._stopped = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            if self._reader:
                self._reader.join(2)
            pytest.fail(
                f"daemon did not exit within {STOP_TIMEOUT_S:.0f} s of SIGTERM\n{self._describe()}",
                pytrace=False,
            )
        if self._reader:
            self._reader.join(2)
        if code != 0:
            pytest.fail(f"daemon exited with code {code} after SIGTERM (expected 0)\n{self._describe()}", pytrace=False)

    # -- clients ------------------------------------------------------------
    @property
    def base_url(self) -> str:
        assert self.url is not None
        return self.url + "/v1"

    def client(self, api_key: Optional[str] = None, **kwargs) -> openai.OpenAI:
        """An official SDK client. No retries: a retry would hide a wrong status."""
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", HTTP_TIMEOUT_S)
        key = api_key if api_key is not None else (self.api_key or "sk-no-key-required")
        return openai.OpenAI(base_url=self.base_url, api_key=key, **kwargs)

    def http(self, api_key: Optional[str] = None) -> httpx.Client:
        """A raw HTTP client rooted at the daemon (paths like "/health", "/v1/models")."""
        headers = {}
        key = api_key if api_key is not None else self.api_key
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=HTTP_TIMEOUT_S)

    def health(self) -> dict:
        with httpx.Client(timeout=HTTP_TIMEOUT_S) as c:
            r = c.get(self.url + "/health")
        assert r.status_code == 200, f"/health -> {r.status_code}: {r.text}"
        return r.json()

    def wait_queue(self, pred: Callable[[dict], bool], what: str, timeout: float = 15.0) -> dict:
        """Poll /health until pred(queue) holds; bounded by `timeout`."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            last = self.health()["queue"]
            if pred(last):
                return last
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; last queue: {last}\n{self._describe()}")
            time.sleep(0.02)  # poll interval, not synchronisation


class DaemonManager:
    def __init__(self) -> None:
        self.daemons: list[Daemon] = []

    def start(
        self,
        model: Optional[str] = DEFAULT_SPEC,
        *,
        queue_depth: Optional[int] = None,
        api_key: Optional[str] = None,
        extra_args: tuple[str, ...] = (),
        env: Optional[dict[str, str]] = None,
        backend: str = "sim",
    ) -> Daemon:
        """`model=None`: no `--model` (the models come from `extra_args`, e.g. `--models-dir`)."""
        binary = daemon_binary()
        args = [
            str(binary),
            *SERVE_SUBCOMMAND,
            "--backend", backend,
            "--host", "127.0.0.1",
            "--port", "0",
        ]
        if model is not None:
            args += ["--model-id", MODEL_ID, "--model", model]
        if queue_depth is not None:
            args += ["--queue-depth", str(queue_depth)]
        if api_key is not None:
            args += ["--api-key", api_key]
        args += list(extra_args)
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**_child_env(), **(env or {})},
            cwd=REPO_ROOT,
        )
        d = Daemon(args=args, proc=proc, api_key=api_key)
        self.daemons.append(d)
        d.wait_ready()
        return d

    def stop_all(self) -> None:
        errors = []
        for d in reversed(self.daemons):
            try:
                d.stop()
            except BaseException as e:  # pytest.fail raises an OutcomeException
                errors.append(e)
        self.daemons.clear()
        if errors:
            raise errors[0]


@pytest.fixture
def start_daemon() -> Iterator[Callable[..., Daemon]]:
    """Function-scoped factory: `start_daemon(model=SPEC, queue_depth=N, api_key=K, extra_args=…, env=…)`."""
    mgr = DaemonManager()
    yield mgr.start
    mgr.stop_all()


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    """The plain daemon (DEFAULT_SPEC), shared by the tests of one module."""
    mgr = DaemonManager()
    d = mgr.start()
    yield d
    mgr.stop_all()


@pytest.fixture
def client(daemon: Daemon) -> Iterator[openai.OpenAI]:
    c = daemon.client()
    yield c
    c.close()
