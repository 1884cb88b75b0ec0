"""Llama-family models from GGUF files (SmolLM, Llama, Mistral-style; Qwen2's q/k/v biases too), in numpy.

Float32 end to end; the first load of a file writes a float32 cache that later loads read instead.

    load.py       load_gguf: a file -> a LlamaModel, from the float32 cache when one verifies
    reader.py     reading a GGUF file (the `gguf` package dequantizes it) into our layout
    checks.py     a file's metadata and tensor shapes, checked against each other when it is opened
    tokenizer.py  the file's tokenizer, built with Hugging Face's `tokenizers`
    cache.py      the float32 cache: written on the first load, verified on every later one
    model.py      LlamaConfig, the forward pass, the KV cache and LlamaModel (the backend)
"""
