#!/bin/sh
# TensorRT-LLM 1.0 prefill/decode disaggregation (TensorRT-LLM tensorrt_llm/commands/serve.py, tensorrt_llm/llmapi/disagg_utils.py, docs/source/features/disagg-serving.md)
cd "$(dirname "$0")"
set -eu
pids=""
trap 'kill $pids 2>/dev/null || true' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# context (prefill) server 0: GPUs 0, http://127.0.0.1:8100
CUDA_VISIBLE_DEVICES=0 trtllm-serve meta-llama/Llama-3.1-8B-Instruct \
    --backend pytorch \
    --tp_size 1 \
    --max_batch_size 64 \
    --max_num_tokens 8192 \
    --kv_cache_free_gpu_memory_fraction 0.9 \
    --extra_llm_api_options trtllm-prefill-options.yaml \
    --host 127.0.0.1 \
    --port 8100 > prefill-0.log 2>&1 &
pids="$pids $!"

# context (prefill) server 1: GPUs 1, http://127.0.0.1:8101
CUDA_VISIBLE_DEVICES=1 trtllm-serve meta-llama/Llama-3.1-8B-Instruct \
    --backend pytorch \
    --tp_size 1 \
    --max_batch_size 64 \
    --max_num_tokens 8192 \
    --kv_cache_free_gpu_memory_fraction 0.9 \
    --extra_llm_api_options trtllm-prefill-options.yaml \
    --host 127.0.0.1 \
    --port 8101 > prefill-1.log 2>&1 &
pids="$pids $!"

# context (prefill) server 2: GPUs 2, http://127.0.0.1:8102
CUDA_VISIBLE_DEVICES=2 trtllm-serve meta-llama/Llama-3.1-8B-Instruct \
    --backend pytorch \
    --tp_size 1 \
    --max_batch_size 64 \
    --max_num_tokens 8192 \
    --kv_cache_free_gpu_memory_fraction 0.9 \
    --extra_llm_api_options trtllm-prefill-options.yaml \
    --host 127.0.0.1 \
    --port 8102 > prefill-2.log 2>&1 &
pids="$pids $!"

# generation (decode) server 0: GPUs 3-4, http://127.0.0.1:8103
CUDA_VISIBLE_DEVICES=3,4 trtllm-serve meta-llama/Llama-3.1-8B-Instruct \
    --backend pytorch \
    --tp_size 2 \
    --max_batch_size 256 \
    --max_num_tokens 2048 \
    --kv_cache_free_gpu_memory_fraction 0.9 \
    --extra_llm_api_options trtllm-decode-options.yaml \
    --host 127.0.0.1 \
    --port 8103 > decode-0.log 2>&1 &
pids="$pids $!"

# the front door: clients send every request here
trtllm-serve disaggregated -c trtllm-disagg-config.yaml \
    --server_start_timeout 1800
