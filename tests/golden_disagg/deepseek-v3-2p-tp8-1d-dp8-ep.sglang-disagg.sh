#!/bin/sh
# SGLang 0.5 prefill/decode disaggregation (sglang 0.5.23 arg_groups/fields/disagg.py, sglang-router 0.3.2 router_args.py)
cd "$(dirname "$0")"
set -eu
pids=""
trap 'kill $pids 2>/dev/null || true' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# prefill server 0: GPUs 0-7, http://127.0.0.1:8100, bootstrap port 8998
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 python -m sglang.launch_server \
    --model-path deepseek-ai/DeepSeek-V3 \
    --dtype bfloat16 \
    --quantization fp8 \
    --kv-cache-dtype auto \
    --max-running-requests 32 \
    --chunked-prefill-size 16384 \
    --max-prefill-tokens 16384 \
    --tp-size 8 \
    --mem-fraction-static 0.9 \
    --page-size 16 \
    --host 127.0.0.1 \
    --port 8100 \
    --disaggregation-mode prefill \
    --disaggregation-transfer-backend mooncake \
    --disaggregation-bootstrap-port 8998 > prefill-0.log 2>&1 &
pids="$pids $!"

# prefill server 1: GPUs 8-15, http://127.0.0.1:8101, bootstrap port 8999
CUDA_VISIBLE_DEVICES=8,9,10,11,12,13,14,15 python -m sglang.launch_server \
    --model-path deepseek-ai/DeepSeek-V3 \
    --dtype bfloat16 \
    --quantization fp8 \
    --kv-cache-dtype auto \
    --max-running-requests 32 \
    --chunked-prefill-size 16384 \
    --max-prefill-tokens 16384 \
    --tp-size 8 \
    --mem-fraction-static 0.9 \
    --page-size 16 \
    --host 127.0.0.1 \
    --port 8101 \
    --disaggregation-mode prefill \
    --disaggregation-transfer-backend mooncake \
    --disaggregation-bootstrap-port 8999 > prefill-1.log 2>&1 &
pids="$pids $!"

# decode server 0: GPUs 16-23, http://127.0.0.1:8102
CUDA_VISIBLE_DEVICES=16,17,18,19,20,21,22,23 python -m sglang.launch_server \
    --model-path deepseek-ai/DeepSeek-V3 \
    --dtype bfloat16 \
    --quantization fp8 \
    --kv-cache-dtype auto \
    --max-running-requests 1024 \
    --chunked-prefill-size 65536 \
    --max-prefill-tokens 8192 \
    --tp-size 8 \
    --enable-dp-attention \
    --dp-size 8 \
    --ep-size 8 \
    --mem-fraction-static 0.9 \
    --page-size 16 \
    --host 127.0.0.1 \
    --port 8102 \
    --disaggregation-mode decode \
    --disaggregation-transfer-backend mooncake > decode-0.log 2>&1 &
pids="$pids $!"

# the front door: clients send every request here
python -m sglang_router.launch_router \
    --pd-disaggregation \
    --prefill http://127.0.0.1:8100 8998 \
    --prefill http://127.0.0.1:8101 8999 \
    --decode http://127.0.0.1:8102 \
    --host 127.0.0.1 \
    --port 8000
