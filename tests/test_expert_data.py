import random

import pytest

from tutorial_lib import envs
from tutorial_lib.expert_data import (
    SelfPlayConfig,
    augment_with_symmetries,
    expert_examples,
    invalid_command,
    load_examples,
    mcts_selfplay,
    save_examples,
    tictactoe_examples,
)
from tutorial_lib.prompts import build_prompt_text


@pytest.fixture(scope="module")
def records():
    return mcts_selfplay(SelfPlayConfig(episodes=4, simulations=50, seed=1), progress=False)


def test_selfplay_records_every_move_of_both_sides(records):
    assert {r["episode"] for r in records} == {0, 1, 2, 3}
    assert {r["mark"] for r in records} == {"x", "o"}
    for r in records:
        assert r["action_text"] in r["legal_actions"]
        assert r["board"].startswith("Board:") and isinstance(r["optimal"], bool)
        assert r["action_text"][0] == r["mark"]
    first = [r for r in records if r["turn"] == 0]
    assert all(r["mark"] == "x" and len(r["legal_actions"]) == 9 for r in first)


def test_epsilon_controls_exploration_and_config_is_checked():
    never = mcts_selfplay(SelfPlayConfig(episodes=2, simulations=10, epsilon=0.0), progress=False)
    always = mcts_selfplay(SelfPlayConfig(episodes=2, simulations=10, epsilon=1.0), progress=False)
    assert not any(r["explored"] for r in never) and all(r["explored"] for r in always)
    with pytest.raises(ValueError, match="epsilon"):
        mcts_selfplay(SelfPlayConfig(episodes=1, epsilon=2.0), progress=False)


def test_more_simulations_pick_more_optimal_moves():
    weak = mcts_selfplay(SelfPlayConfig(episodes=15, simulations=2, seed=0), progress=False)
    strong = mcts_selfplay(SelfPlayConfig(episodes=15, simulations=300, seed=0), progress=False)
    rate = lambda rs: sum(r["optimal"] for r in rs) / len(rs)  # noqa: E731
    assert rate(strong) > rate(weak)


def test_examples_use_the_prompt_the_env_shows(records):
    example = tictactoe_examples([records[0]])[0]
    env = envs.make("tictactoe", agent_mark="x")
    observation, info = env.reset(seed=0)
    from tutorial_lib.prompts import Turn

    assert example["prompt"] == build_prompt_text("tictactoe", env.task, [Turn(observation, info=info)])
    assert example["completion"] == f"<move>{records[0]['action_text']}</move>"


def test_symmetries_give_eight_legal_distinct_examples():
    record = {
        "board": "Board:\nx o .\n. . .\n. . .",
        "mark": "x",
        "legal_actions": [m for m in (f"x({r},{c})" for r in range(3) for c in range(3)) if m not in ("x(0,0)", "x(0,1)")],
        "action_text": "x(1,1)",
    }
    augmented = augment_with_symmetries([record])
    assert len(augmented) == 8 and len({a["board"] for a in augmented}) == 8
    for a in augmented:
        rows = [line.split() for line in a["board"].splitlines()[1:]]
        r, c = int(a["action_text"][2]), int(a["action_text"][4])
        assert rows[r][c] == "." and a["action_text"] in a["legal_actions"]
        assert sorted(sum(rows, [])) == sorted(["x", "o"] + ["."] * 7)


def test_expert_transcripts_and_json_roundtrip(tmp_path):
    examples = expert_examples("guess_the_number", range(5))
    assert all(e["completion"].startswith("\\boxed{") for e in examples)
    assert len({e["seed"] for e in examples}) == 5
    second_turns = [e for e in examples if e["turn"] == 1]
    assert all("Recent turns" in e["prompt"] for e in second_turns)  # the history window shows
    path = save_examples(examples, tmp_path / "gtn.jsonl")
    dataset = load_examples(path)
    assert len(dataset) == len(examples) and dataset[0]["completion"] == examples[0]["completion"]
    with pytest.raises(FileNotFoundError, match="python -m tutorial_lib data"):
        load_examples(tmp_path / "missing.jsonl")


def test_cookingworld_data_comes_from_the_gold_path():
    world = dict(num_locations=1, num_ingredients=1, num_distractor_items=1)
    examples = expert_examples("cookingworld", range(2), env_options=world)
    with envs.make("cookingworld", **world) as env:
        env.reset(seed=0)
        gold = env.gold_path
    assert [e["completion"] for e in examples if e["seed"] == 0] == gold


def test_invalid_commands_are_never_valid_and_vary():
    valid = ["take knife", "open fridge", "read cookbook", "move west"]
    rng = random.Random(0)
    commands = [invalid_command(valid, ["take cookbook", "open fridge"], rng) for _ in range(200)]
    assert not set(commands) & set(valid)
    assert "take cookbook" in commands  # an earlier command repeated when no longer valid
    assert any(c.endswith(tuple(f" in {w}" for w in ("knife", "fridge", "west"))) for c in commands)
    assert len(set(commands)) > 20
    with pytest.raises(ValueError, match="empty"):
        invalid_command([], [], rng)


def test_recovery_data_keeps_the_gold_labels_after_injected_mistakes():
    world = dict(num_locations=1, num_ingredients=1, num_distractor_items=1)
    clean = expert_examples("cookingworld", range(3), env_options=world)
    noisy = expert_examples("cookingworld", range(3), env_options=world, mistake_rate=0.5, seed=1)
    # the same gold actions, in the same order: a mistake changes nothing, and is never a label
    for seed in range(3):
        assert [e["completion"] for e in noisy if e["seed"] == seed] == [e["completion"] for e in clean if e["seed"] == seed]
    after = [e for e in noisy if e["mistakes_before"]]
    assert after and all(e["mistakes_before"] == 0 for e in clean)
    assert all("Invalid command" in e["prompt"] or "Your actions so far" in e["prompt"] for e in after)
    assert any("Invalid command" in e["prompt"] for e in after)  # the observation after a mistake
    with pytest.raises(ValueError, match="invalid command changes nothing"):
        expert_examples("guess_the_number", range(2), mistake_rate=0.1)
    with pytest.raises(ValueError, match="rate must be"):
        expert_examples("cookingworld", range(1), env_options=world, mistake_rate=1.0)
