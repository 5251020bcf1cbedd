#!/bin/sh
# TensorRT-LLM 1.0 prefill/decode disaggregation (TensorRT-LLM tensorrt_llm/commands/serve.py, tensorrt_llm/llmapi/disagg_utils.py, docs/source/features/disagg-serving.md)
cd "$(dirname "$0")"
set -eu
pids=""
trap 'kill $pids 2>/dev/null || true' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# context (prefill) server 0: GPUs 0-7, http://127.0.0.1:8100
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 trtllm-serve deepseek-ai/DeepSeek-V3 \
    --backend pytorch \
    --tp_size 8 \
    --max_batch_size 32 \
    --max_num_tokens 16384 \
    --kv_cache_free_gpu_memory_fraction 0.9 \
    --extra_llm_api_options trtllm-prefill-options.yaml \
    --host 127.0.0.1 \
    --port 8100 > prefill-0.log 2>&1 &
pids="$pids $!"

# context (prefill) server 1: GPUs 8-15, http://127.0.0.1:8101
CUDA_VISIBLE_DEVICES=8,9,10,11,12,13,14,15 trtllm-serve deepseek-ai/DeepSeek-V3 \
    --backend pytorch \
    --tp_size 8 \
    --max_batch_size 32 \
    --max_num_tokens 16384 \
    --kv_cache_free_gpu_memory_fraction 0.9 \
    --extra_llm_api_options trtllm-prefill-options.yaml \
    --host 127.0.0.1 \
    --port 8101 > prefill-1.log 2>&1 &
pids="$pids $!"

# generation (decode) server 0: GPUs 16-23, http://127.0.0.1:8102
CUDA_VISIBLE_DEVICES=16,17,18,19,20,21,22,23 trtllm-serve deepseek-ai/DeepSeek-V3 \
    --backend pytorch \
    --tp_size 8 \
    --ep_size 8 \
    --max_batch_size 128 \
    --max_num_tokens 8192 \
    --kv_cache_free_gpu_memory_fraction 0.9 \
    --extra_llm_api_options trtllm-decode-options.yaml \
    --host 127.0.0.1 \
    --port 8102 > decode-0.log 2>&1 &
pids="$pids $!"

# the front door: clients send every request here
trtllm-serve disaggregated -c trtllm-disagg-config.yaml \
    --server_start_timeout 1800
