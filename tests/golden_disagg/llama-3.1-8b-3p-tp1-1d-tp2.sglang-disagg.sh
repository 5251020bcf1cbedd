#!/bin/sh
# SGLang 0.5 prefill/decode disaggregation (sglang 0.5.23 arg_groups/fields/disagg.py, sglang-router 0.3.2 router_args.py)
cd "$(dirname "$0")"
set -eu
pids=""
trap 'kill $pids 2>/dev/null || true' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# prefill server 0: GPUs 0, http://127.0.0.1:8100, bootstrap port 8998
CUDA_VISIBLE_DEVICES=0 python -m sglang.launch_server \
    --model-path meta-llama/Llama-3.1-8B-Instruct \
    --dtype bfloat16 \
    --kv-cache-dtype auto \
    --max-running-requests 64 \
    --chunked-prefill-size 8192 \
    --max-prefill-tokens 8192 \
    --tp-size 1 \
    --mem-fraction-static 0.9 \
    --page-size 16 \
    --host 127.0.0.1 \
    --port 8100 \
    --disaggregation-mode prefill \
    --disaggregation-transfer-backend mooncake \
    --disaggregation-bootstrap-port 8998 > prefill-0.log 2>&1 &
pids="$pids $!"

# prefill server 1: GPUs 1, http://127.0.0.1:8101, bootstrap port 8999
CUDA_VISIBLE_DEVICES=1 python -m sglang.launch_server \
    --model-path meta-llama/Llama-3.1-8B-Instruct \
    --dtype bfloat16 \
    --kv-cache-dtype auto \
    --max-running-requests 64 \
    --chunked-prefill-size 8192 \
    --max-prefill-tokens 8192 \
    --tp-size 1 \
    --mem-fraction-static 0.9 \
    --page-size 16 \
    --host 127.0.0.1 \
    --port 8101 \
    --disaggregation-mode prefill \
    --disaggregation-transfer-backend mooncake \
    --disaggregation-bootstrap-port 8999 > prefill-1.log 2>&1 &
pids="$pids $!"

# prefill server 2: GPUs 2, http://127.0.0.1:8102, bootstrap port 9000
CUDA_VISIBLE_DEVICES=2 python -m sglang.launch_server \
    --model-path meta-llama/Llama-3.1-8B-Instruct \
    --dtype bfloat16 \
    --kv-cache-dtype auto \
    --max-running-requests 64 \
    --chunked-prefill-size 8192 \
    --max-prefill-tokens 8192 \
    --tp-size 1 \
    --mem-fraction-static 0.9 \
    --page-size 16 \
    --host 127.0.0.1 \
    --port 8102 \
    --disaggregation-mode prefill \
    --disaggregation-transfer-backend mooncake \
    --disaggregation-bootstrap-port 9000 > prefill-2.log 2>&1 &
pids="$pids $!"

# decode server 0: GPUs 3-4, http://127.0.0.1:8103
CUDA_VISIBLE_DEVICES=3,4 python -m sglang.launch_server \
    --model-path meta-llama/Llama-3.1-8B-Instruct \
    --dtype bfloat16 \
    --kv-cache-dtype auto \
    --max-running-requests 256 \
    --chunked-prefill-size 2048 \
    --max-prefill-tokens 2048 \
    --tp-size 2 \
    --mem-fraction-static 0.9 \
    --page-size 16 \
    --host 127.0.0.1 \
    --port 8103 \
    --disaggregation-mode decode \
    --disaggregation-transfer-backend mooncake > decode-0.log 2>&1 &
pids="$pids $!"

# the front door: clients send every request here
python -m sglang_router.launch_router \
    --pd-disaggregation \
    --prefill http://127.0.0.1:8100 8998 \
    --prefill http://127.0.0.1:8101 8999 \
    --prefill http://127.0.0.1:8102 9000 \
    --decode http://127.0.0.1:8103 \
    --host 127.0.0.1 \
    --port 8000
