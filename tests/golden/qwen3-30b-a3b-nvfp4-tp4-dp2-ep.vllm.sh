#!/bin/sh
exec vllm serve Qwen/Qwen3-30B-A3B \
    --dtype bfloat16 \
    --quantization modelopt_fp4 \
    --kv-cache-dtype auto \
    --max-num-seqs 96 \
    --max-num-batched-tokens 4096 \
    --tensor-parallel-size 4 \
    --data-parallel-size 2 \
    --enable-expert-parallel \
    --gpu-memory-utilization 0.9 \
    --block-size 16 \
    --enable-prefix-caching \
    --enable-chunked-prefill
