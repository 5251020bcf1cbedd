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

# prefill instance 0: GPUs 0, http://127.0.0.1:8100, NIXL side channel port 5600
CUDA_VISIBLE_DEVICES=0 VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve meta-llama/Llama-3.1-8B-Instruct \
    --dtype bfloat16 \
    --kv-cache-dtype auto \
    --max-num-seqs 64 \
    --max-num-batched-tokens 8192 \
    --tensor-parallel-size 1 \
    --gpu-memory-utilization 0.9 \
    --block-size 16 \
    --enable-prefix-caching \
    --enable-chunked-prefill \
    --host 127.0.0.1 \
    --port 8100 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' > prefill-0.log 2>&1 &
pids="$pids $!"

# prefill instance 1: GPUs 1, http://127.0.0.1:8101, NIXL side channel port 5601
CUDA_VISIBLE_DEVICES=1 VLLM_NIXL_SIDE_CHANNEL_PORT=5601 vllm serve meta-llama/Llama-3.1-8B-Instruct \
    --dtype bfloat16 \
    --kv-cache-dtype auto \
    --max-num-seqs 64 \
    --max-num-batched-tokens 8192 \
    --tensor-parallel-size 1 \
    --gpu-memory-utilization 0.9 \
    --block-size 16 \
    --enable-prefix-caching \
    --enable-chunked-prefill \
    --host 127.0.0.1 \
    --port 8101 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' > prefill-1.log 2>&1 &
pids="$pids $!"

# prefill instance 2: GPUs 2, http://127.0.0.1:8102, NIXL side channel port 5602
CUDA_VISIBLE_DEVICES=2 VLLM_NIXL_SIDE_CHANNEL_PORT=5602 vllm serve meta-llama/Llama-3.1-8B-Instruct \
    --dtype bfloat16 \
    --kv-cache-dtype auto \
    --max-num-seqs 64 \
    --max-num-batched-tokens 8192 \
    --tensor-parallel-size 1 \
    --gpu-memory-utilization 0.9 \
    --block-size 16 \
    --enable-prefix-caching \
    --enable-chunked-prefill \
    --host 127.0.0.1 \
    --port 8102 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' > prefill-2.log 2>&1 &
pids="$pids $!"

# decode instance 0: GPUs 3-4, http://127.0.0.1:8103, NIXL side channel port 5603
CUDA_VISIBLE_DEVICES=3,4 VLLM_NIXL_SIDE_CHANNEL_PORT=5603 vllm serve meta-llama/Llama-3.1-8B-Instruct \
    --dtype bfloat16 \
    --kv-cache-dtype auto \
    --max-num-seqs 256 \
    --max-num-batched-tokens 2048 \
    --tensor-parallel-size 2 \
    --gpu-memory-utilization 0.9 \
    --block-size 16 \
    --enable-prefix-caching \
    --enable-chunked-prefill \
    --host 127.0.0.1 \
    --port 8103 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' > decode-0.log 2>&1 &
pids="$pids $!"

# the front door: clients send every request here
python "$VLLM_PROXY" --host 127.0.0.1 \
    --port 8000 \
    --prefiller-hosts 127.0.0.1 127.0.0.1 127.0.0.1 \
    --prefiller-ports 8100 8101 8102 \
    --decoder-hosts 127.0.0.1 \
    --decoder-ports 8103
