#!/bin/sh
exec trtllm-serve deepseek-ai/DeepSeek-V3 \
    --backend pytorch \
    --tp_size 8 \
    --ep_size 8 \
    --max_batch_size 64 \
    --max_num_tokens 8192 \
    --kv_cache_free_gpu_memory_fraction 0.9 \
    --extra_llm_api_options trtllm-extra-llm-api-options.yaml
