#!/bin/sh
exec trtllm-serve meta-llama/Llama-3.1-8B-Instruct \
    --backend pytorch \
    --tp_size 2 \
    --max_batch_size 181 \
    --max_num_tokens 6656 \
    --kv_cache_free_gpu_memory_fraction 0.9 \
    --extra_llm_api_options trtllm-extra-llm-api-options.yaml
