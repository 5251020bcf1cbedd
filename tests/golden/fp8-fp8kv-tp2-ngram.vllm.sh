#!/bin/sh
exec vllm serve meta-llama/Llama-3.1-8B-Instruct \
    --dtype bfloat16 \
    --quantization fp8 \
    --kv-cache-dtype fp8 \
    --max-num-seqs 181 \
    --max-num-batched-tokens 6656 \
    --tensor-parallel-size 2 \
    --gpu-memory-utilization 0.9 \
    --block-size 16 \
    --enable-prefix-caching \
    --enable-chunked-prefill \
    --speculative-config '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}'
