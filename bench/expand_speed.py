"""Expanding the tree (issue 16's goals: 500 nodes on the story model <= 1 s; 100 nodes of SmolLM2 with the
llama.cpp backend <= 5 s): Session.expand from the end of a short generation, under the raw model and under
the chain, with the tokens it fed the model against what computing each node from the prompt would feed.

Prefixes are reused: the nodes of a level are visited in the tree's order, so the next node shares all but
its last token or two with the cache; the cache is truncated to the shared prefix and only the rest is fed.

Then issue 30's goal, cost per node flat as the tree grows: SmolLM2's ms per node (and rows read, tokens
fed per node) at 100 / 1,000 / 5,000 nodes (top 3 children, raw model, deep enough that the budget cuts
the last level), the sizes interleaved round by round. Beside the rows read, the rows any exact expansion must
read for the same tree (rows_needed): where the budget cuts a wide last level, many of its parents' rows must be
read to find the likeliest children, so the rows per node rise with where the cut falls, not with the engine.

    python bench/expand_speed.py [--rounds 3] [--scaling-rounds 2] [--no-llamacpp] [--scaling-only]

The scaling table's last column is a hash of each tree (every node's parent and step record): run it in a
clone of main too, the same hashes say the trees are the same, bit for bit.
"""

import argparse
import hashlib
import pickle
import time

from threadpoolctl import threadpool_limits

import engine

SCALING = (100, 1_000, 5_000)  # nodes
SCALING_PROMPT = "The old lighthouse keeper opened the door and"
CASES = (  # (model, prompt, nodes, top_k, depth)
    ("story", "mia has a red ball. ", 500, 3, 8),
    ("smollm2", "The old lighthouse keeper opened the door and", 100, 3, 6),
)


def counting(model) -> list[int]:
    """Count the tokens the model is fed and the rows it reads for nodes (wraps its forward_cached, and
    forward_branches where it reads several branches in one pass: a token they share is fed once)."""
    fed = [0, 0]
    forward = model.forward_cached

    def counted(ids, cache, last_only=False):
        fed[0] += len(ids)
        fed[1] += 1
        return forward(ids, cache, last_only=last_only)

    model.forward_cached = counted
    if hasattr(model, "forward_branches"):
        from engine.backends.llamacpp.branches import trie

        branched = model.forward_branches

        def counted_branches(branches, cache, residual_add=None):
            rows = branched(branches, cache, residual_add)
            if rows is not None:
                fed[0] += len(trie(branches)[0])
                fed[1] += len(branches)
            return rows

        model.forward_branches = counted_branches
    return fed


def measure(model, prompt: str, nodes: int, top_k: int, depth: int, rounds: int, settings: dict):
    fed = counting(model)
    times = []
    for _ in range(rounds):
        session = engine.Session(model, prompt, max_new_tokens=4, **settings)
        session.run()
        fed[:] = [0, 0]
        start, cpu = time.perf_counter(), time.process_time()
        result = session.expand(top_k=top_k, depth=depth, budget=nodes, raw=settings.get("temperature", 0) == 0)
        times.append(time.perf_counter() - start)
        measure.cpu = time.process_time() - cpu  # this process's CPU time (llama.cpp at 1 thread: its pass)
        measure.session = session
    from_prompt = sum(len(session.tree.path(n)) - 1 + len(session.prompt_ids) for n in result.nodes)
    tree = tree_hash(session, result.nodes)
    del model.forward_cached
    model.__dict__.pop("forward_branches", None)
    return times, result, fed[0], from_prompt, fed[1], tree  # fed[1]: the nodes whose row was read


def tree_hash(session, nodes) -> str:
    """A hash of these nodes of the tree: each one's parent and step record, bit for bit."""
    records = [(session.tree.nodes[n].parent, session.tree.nodes[n].step.to_dict()) for n in nodes]
    return hashlib.sha256(pickle.dumps(records)).hexdigest()[:12]


def rows_needed(session, result, budget: int) -> int:
    """The fewest rows any exact expansion reads for this tree (raw model): every node that has children to give
    (not an end token) on the levels above the last one's parents, and of the last level's parents, where the budget
    cut that level, each whose own sequence probability p beats the least kept child's: its children's p * q <= p,
    so the others cannot give a kept child, and whether one of these does is known only from its row."""
    tree, ends = session.tree, set(session.model.end_token_ids)
    start = tree.nodes[result.nodes[0]].parent
    p, level = {start: 1.0}, {start: 0}
    for node in result.nodes:  # level by level: each after its parent
        parent = tree.nodes[node].parent
        p[node] = p[parent] * tree.nodes[node].step.model_probability  # the order expand multiplies in
        level[node] = level[parent] + 1
    last = max(level.values())
    gives = [n for n in level if level[n] < last and (n == start or tree.nodes[n].step.token_id not in ends)]
    if len(result.nodes) < budget:
        return len(gives)
    cut = min(p[n] for n in level if level[n] == last)
    return sum(1 for n in gives if level[n] < last - 1 or p[n] > cut)


def scaling(model, rounds: int) -> None:
    """ms per node at each of SCALING's sizes, the sizes interleaved round by round; rows read and tokens
    fed are the same every round, and so is the tree."""
    times, cpu, counts = {nodes: [] for nodes in SCALING}, {nodes: [] for nodes in SCALING}, {}
    measure(model, SCALING_PROMPT, 10, 3, 10, 1, {})  # warm: the model's healing table, built at a first expansion
    for _ in range(rounds):
        for nodes in SCALING:
            seconds, result, fed, _naive, reads, tree = measure(model, SCALING_PROMPT, nodes, 3, 10, 1, {})
            times[nodes].append(seconds[0] * 1000 / len(result.nodes))
            cpu[nodes].append(measure.cpu * 1000 / len(result.nodes))
            needed = rows_needed(measure.session, result, nodes) / len(result.nodes)
            counts[nodes] = (reads / len(result.nodes), needed, fed / len(result.nodes), result.levels, tree)
    print(
        "\n| SmolLM2 nodes | ms per node | CPU ms per node | ms per row read | rows read per node | rows needed per node "
        "| tokens fed per node | levels | tree |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for nodes in SCALING:
        per_node, (reads, needed, fed, levels, tree) = times[nodes], counts[nodes]
        print(f"| {nodes:,} | {min(per_node):.1f}-{max(per_node):.1f} | {min(cpu[nodes]):.1f}-{max(cpu[nodes]):.1f} | "
              f"{min(per_node) / reads:.1f}-"
              f"{max(per_node) / reads:.1f} | {reads:.2f} | {needed:.2f} | {fed:.2f} | {levels} | {tree} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scaling-rounds", type=int, default=2)
    parser.add_argument("--no-llamacpp", action="store_true")
    parser.add_argument("--scaling-only", action="store_true", help="only SmolLM2's ms per node at 100 / 1,000 / 5,000")
    args = parser.parse_args()
    if not args.scaling_only:
        print(
            "| model | mode | nodes (rows read) | levels | seconds | goal | tokens fed | fed if each node came from the prompt |"
        )
        print("|---|---|---|---|---|---|---|---|")
    for name, prompt, nodes, top_k, depth in CASES:
        if name != "smollm2" and args.scaling_only:
            continue
        if name == "smollm2":
            if args.no_llamacpp:
                continue
            model = engine.load_model("smollm2", backend="llama.cpp", context_length=512)
            goal = 5.0
        else:
            model, goal = engine.load_model(), 1.0
        with threadpool_limits(1):
            modes = (("raw model", {}), ("chain, temperature 1, top-k 40", dict(temperature=1.0, top_k=40)))
            for mode, settings in () if args.scaling_only else modes:
                times, result, fed, naive, reads, _tree = measure(
                    model, prompt, nodes, top_k, depth, args.rounds, settings
                )
                print(f"| {name} | {mode} | {len(result.nodes)} ({reads} read) | {result.levels} | "
                      f"{min(times):.2f}-{max(times):.2f} | {goal:g} | {fed} | {naive} |")  # fmt: skip
            if name == "smollm2" and args.scaling_rounds > 0:
                scaling(model, args.scaling_rounds)
        model.close()
    only = " --scaling-only" if args.scaling_only else ""
    print(f"command: python bench/expand_speed.py --rounds {args.rounds} --scaling-rounds {args.scaling_rounds}{only}")


if __name__ == "__main__":
    main()
