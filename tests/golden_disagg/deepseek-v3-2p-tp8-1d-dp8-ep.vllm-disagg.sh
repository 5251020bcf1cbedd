#!/bin/sh
# vLLM 0.32 prefill/decode disaggregation (vllm 0.32 vllm/config/kv_transfer.py, docs/features/nixl_connector_usage.md)
cd "$(dirname "$0")"
set -eu
pids=""
trap 'kill $pids 2>/dev/null || true' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# vLLM's example proxy: VLLM_PROXY names its file in a vLLM checkout
: "${VLLM_PROXY:?set VLLM_PROXY to the path of tests/v1/kv_connector/nixl_integration/toy_proxy_server.py in a vLLM checkout}"

# prefill instance 0: GPUs 0-7, http://127.0.0.1:8100, NIXL side channel port 5600
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve deepseek-ai/DeepSeek-V3 \
    --dtype bfloat16 \
    --quantization fp8 \
    --kv-cache-dtype auto \
    --max-num-seqs 32 \
    --max-num-batched-tokens 16384 \
    --tensor-parallel-size 8 \
    --gpu-memory-utilization 0.9 \
    --block-size 16 \
    --enable-prefix-caching \
    --enable-chunked-prefill \
    --host 127.0.0.1 \
    --port 8100 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' > prefill-0.log 2>&1 &
pids="$pids $!"

# prefill instance 1: GPUs 8-15, http://127.0.0.1:8101, NIXL side channel port 5601
CUDA_VISIBLE_DEVICES=8,9,10,11,12,13,14,15 VLLM_NIXL_SIDE_CHANNEL_PORT=5601 vllm serve deepseek-ai/DeepSeek-V3 \
    --dtype bfloat16 \
    --quantization fp8 \
    --kv-cache-dtype auto \
    --max-num-seqs 32 \
    --max-num-batched-tokens 16384 \
    --tensor-parallel-size 8 \
    --gpu-memory-utilization 0.9 \
    --block-size 16 \
    --enable-prefix-caching \
    --enable-chunked-prefill \
    --host 127.0.0.1 \
    --port 8101 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' > prefill-1.log 2>&1 &
pids="$pids $!"

# decode instance 0: GPUs 16-23, http://127.0.0.1:8102, NIXL side channel ports 5602-5609 (one per DP rank)
CUDA_VISIBLE_DEVICES=16,17,18,19,20,21,22,23 VLLM_NIXL_SIDE_CHANNEL_PORT=5602 vllm serve deepseek-ai/DeepSeek-V3 \
    --dtype bfloat16 \
    --quantization fp8 \
    --kv-cache-dtype auto \
    --max-num-seqs 128 \
    --max-num-batched-tokens 8192 \
    --tensor-parallel-size 1 \
    --data-parallel-size 8 \
    --enable-expert-parallel \
    --gpu-memory-utilization 0.9 \
    --block-size 16 \
    --enable-prefix-caching \
    --enable-chunked-prefill \
    --host 127.0.0.1 \
    --port 8102 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' > decode-0.log 2>&1 &
pids="$pids $!"

# the front door: clients send every request here
python "$VLLM_PROXY" --host 127.0.0.1 \
    --port 8000 \
    --prefiller-hosts 127.0.0.1 127.0.0.1 \
    --prefiller-ports 8100 8101 \
    --decoder-hosts 127.0.0.1 \
    --decoder-ports 8102
