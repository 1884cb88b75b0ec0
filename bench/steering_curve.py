"""Steering with a direction on SmolLM2 (issue 28): a happy-minus-sad direction, made from three contrast prompts
each on the numpy engine, added after one layer at 5 strengths; the total probability of a fixed list of positive
words as the next token after "Today I feel", on the numpy engine and on llama.cpp (the same GGUF file). Also the
time to make the direction and a greedy step's time with and without steering (llama.cpp). Then Gemma 3 270M on
llama.cpp (an architecture only llama.cpp runs here): its direction made from its own residual stream (llama.cpp's
graph callback), after layer 9 of 18, at GEMMA_STRENGTHS (its stream is far larger: strengths under 1).

    python bench/steering_curve.py
"""

import statistics
import time

import engine
from engine.discovery import gemma3_path

POSITIVE = ["I am so happy and joyful today!", "What a wonderful, delightful day.", "I love this, it makes me glad."]
NEGATIVE = ["I am so sad and miserable today.", "What a terrible, gloomy day.", "I hate this, it makes me cry."]
WORDS = [" happy", " great", " wonderful", " good", " glad", " joy", " love", " beautiful"]
PROMPT = "Today I feel"
STRENGTHS = (-2.0, -1.0, 0.0, 1.0, 2.0)
LAYERS = ([12], [6], [15])
GEMMA_STRENGTHS = (-0.6, -0.3, 0.0, 0.3, 0.6)


def positive_mass(model, vector, layers, strength) -> float:
    session = engine.Session(model, PROMPT, max_new_tokens=1)
    session.steer_vector(vector, layers, strength)
    ids = [model.tokenizer.encode(word)[-1] for word in WORDS]  # (Gemma's encode starts with <bos>)
    return float(session._context.distributions(session.ids, session.settings).raw[ids].sum())


def step_ms(model, vector, strength, steps=20) -> list[float]:
    session = engine.Session(model, PROMPT, max_new_tokens=steps + 1)
    session.steer_vector(vector, [12], strength)
    session.step()  # the prompt's read
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        session.step()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    numpy_model = engine.load_model("smollm2", backend="numpy")
    started = time.perf_counter()
    vector = engine.steering_vector(numpy_model, POSITIVE, NEGATIVE)
    print(f"direction from 3 + 3 prompts on the numpy engine: {time.perf_counter() - started:.2f} s")
    llama = engine.load_model("smollm2", backend="llama.cpp")
    print(f"P(positive words) after {PROMPT!r}, strengths {STRENGTHS}:")
    for name, model in (("numpy", numpy_model), ("llama.cpp", llama)):
        for layers in LAYERS:
            curve = [positive_mass(model, vector, layers, s) for s in STRENGTHS]
            print(f"  {name:9} layer {layers[0]:2}: " + "  ".join(f"{p:.4f}" for p in curve))
    for strength in (-2.0, 0.0, 2.0):  # what it reads like: greedy, llama.cpp, layer 12
        session = engine.Session(llama, PROMPT, max_new_tokens=12)
        session.steer_vector(vector, [12], strength)
        session.run()
        print(f"  strength {strength:+g}: {PROMPT + session.generated_text!r}")
    for strength in (0.0, 1.0):
        times = sorted(step_ms(llama, vector, strength))
        print(f"llama.cpp greedy step, strength {strength:g}: median {statistics.median(times):.1f} ms "
              f"(range {times[0]:.1f}-{times[-1]:.1f})")  # fmt: skip
    gemma = engine.load_model(gemma3_path(), backend="llama.cpp")
    started = time.perf_counter()
    gemma_vector = engine.steering_vector(gemma, POSITIVE, NEGATIVE)
    print(
        f"Gemma 3 on llama.cpp: direction made there in {time.perf_counter() - started:.2f} s; layer 9, strengths "
        f"{GEMMA_STRENGTHS}: " + "  ".join(f"{positive_mass(gemma, gemma_vector, [9], s):.4f}" for s in GEMMA_STRENGTHS)
    )


if __name__ == "__main__":
    main()
