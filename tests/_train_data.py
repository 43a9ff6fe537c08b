"""Hand-built moderator datasets (docs/contracts.md columns) for the training tests."""

import random

from datasets import Dataset, DatasetDict

from metamod.rollout.state import moderator_messages


def moderator_rows(n: int, seed: int) -> list[dict]:
    """Arithmetic rounds with two agents: agreement on gold, disagreement, or agreement on a wrong answer."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(2, 50), rng.randint(2, 50)
        gold = str(a + b)
        case = rng.random()
        answers = [gold, gold] if case < 0.4 else [gold, str(a + b + 1)] if case < 0.7 else [str(a + b + 2)] * 2
        final = i % 5 == 4
        responses = [f"{a} + {b} = {x}. <answer>{x}</answer>" for x in answers]
        rows.append(
            {
                "prompt": moderator_messages(f"What is {a} + {b}?", responses, final=final),
                "eta": int(gold in answers),
                "gold": gold,
                "kind": "math",
                "round": i % 5,
                "is_final_round": final,
                "id": f"q{seed}-{i // 5}",
                "task": "arith",
                "answers": answers,
                "num_agents": 2,
                "simulated": True,
            }
        )
    return rows


def save_dataset(path, *, n_train: int = 48, n_val: int = 16, drop: tuple[str, ...] = ()) -> str:
    splits = {}
    for name, n, seed in (("train", n_train, 0), ("validation", n_val, 1)):
        ds = Dataset.from_list(moderator_rows(n, seed))
        splits[name] = ds.remove_columns(list(drop)) if drop else ds
    DatasetDict(splits).save_to_disk(str(path))
    return str(path)
