import random

import pytest

from tutorial_lib import envs
from tutorial_lib.data.expert_data import (
    COOKING_METHODS,
    CUT_VERBS,
    SelfPlayConfig,
    augment_with_symmetries,
    counterfactual_recipes,
    expert_examples,
    invalid_command,
    is_recipe_step,
    load_examples,
    mcts_selfplay,
    recipe_permutations,
    rewrite_recipe,
    save_examples,
    tictactoe_examples,
)
from tutorial_lib.lm.prompts import build_prompt_text


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
    from tutorial_lib.lm.prompts import Turn

    assert example["prompt"] == build_prompt_text("tictactoe", env.task, [Turn(observation, info=info)])
    assert example["completion"] == f"<move>{records[0]['action_text']}</move>"


def test_worked_lines_come_before_the_move_and_the_move_is_what_parses(records):
    from tutorial_lib.envs.parsing import parse_tictactoe_move
    from tutorial_lib.envs.tictactoe import worked_lines

    for record, example in zip(records, tictactoe_examples(records, worked_lines=True)):
        lines, move = example["completion"].split("\n")
        assert lines == worked_lines(record["board"]) and move == f"<move>{record['action_text']}</move>"
        # the lines name squares as bare moves, possibly the opponent's: the tagged move wins
        assert parse_tictactoe_move(example["completion"]).value == record["action_text"]


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


IDENTITY_CUT, IDENTITY_COOK = recipe_permutations("")  # the permutations that change nothing


def _replay(env, seed, actions):
    env.reset(seed=seed)
    for action in actions:
        observation, _, _, _, info = env.step(action)
    return observation, info["valid_actions"]


def test_rewritten_recipe_steps_read_as_the_game_writes_them():
    """Cut or cook an ingredient the other ways in the real game: what the game answers, and the
    actions it then offers, are the gold step's text rewritten (only "prepare meal" differs: the
    real game offers it only when the recipe was followed)."""
    world = dict(num_locations=1, num_ingredients=1, num_distractor_items=1)
    checked = set()
    with envs.make("cookingworld", **world) as env:
        for seed in range(60):
            if checked == {"cut", "cook"}:
                break
            env.reset(seed=seed)
            gold = env.gold_path
            for i, action in enumerate(gold):
                if not is_recipe_step(action):
                    continue
                verb = action.split()[0]
                observation, valid = _replay(env, seed, gold[: i + 1])
                names = CUT_VERBS if verb in CUT_VERBS else tuple(COOKING_METHODS)
                for other in names:
                    if verb in CUT_VERBS:
                        cut, cook = dict(IDENTITY_CUT, **{verb: other, other: verb}), IDENTITY_COOK
                    else:
                        method = {a: m for m, a in COOKING_METHODS.items()}[action.split()[-1]]
                        cut, cook = IDENTITY_CUT, dict(IDENTITY_COOK, **{method: other, other: method})
                    new_action = rewrite_recipe(action, cut, cook)
                    real_observation, real_valid = _replay(env, seed, [*gold[:i], new_action])
                    assert rewrite_recipe(observation, cut, cook) == real_observation
                    rewritten = rewrite_recipe("Valid actions: " + " | ".join(valid), cut, cook)
                    drop = {"prepare meal"}
                    assert [a for a in rewritten[len("Valid actions: "):].split(" | ") if a not in drop] == [
                        a for a in real_valid if a not in drop]
                    checked.add("cut" if verb in CUT_VERBS else "cook")
    assert checked == {"cut", "cook"}


def test_counterfactual_recipes_rewrite_whole_episodes_consistently():
    world = dict(num_locations=1, num_ingredients=1, num_distractor_items=1)
    examples = expert_examples("cookingworld", range(8), env_options=world)
    swapped = counterfactual_recipes(examples, seed=3)
    assert len(swapped) == len(examples)
    assert swapped == counterfactual_recipes(examples, seed=3)  # seeded
    for seed in range(8):
        episode = [e for e in swapped if e["seed"] == seed]
        assert len({e["recipe_swap"] for e in episode}) == 1  # one permutation per episode
        # the swap names the permutation: the original prompts rewrite to the stored ones
        permutations = recipe_permutations(episode[0]["recipe_swap"])
        originals = [e["prompt"] for e in examples if e["seed"] == seed]
        assert [rewrite_recipe(p, *permutations) for p in originals] == [e["prompt"] for e in episode]
        for e in episode:  # the label is still one of the actions the prompt offers
            assert e["completion"] in e["prompt"].split("Valid actions: ")[1].split("\n")[0].split(" | ")
    assert any(e["recipe_swap"] for e in swapped)
    # the cut and cook steps, and only they, come step_copies more times, right after the original
    copied = counterfactual_recipes(examples, seed=3, step_copies=2)
    steps = [e for e in examples if is_recipe_step(e["completion"])]
    assert steps and len(copied) == len(examples) + 2 * len(steps)
    for i, e in enumerate(copied):
        if is_recipe_step(e["completion"]) and (i == 0 or copied[i - 1]["turn"] != e["turn"]):
            assert [(c["seed"], c["turn"]) for c in copied[i:i + 3]] == [(e["seed"], e["turn"])] * 3
    with pytest.raises(ValueError, match="step_copies"):
        counterfactual_recipes(examples, step_copies=-1)
    # a recipe step and its action change together, the rest of the text does not
    text = "Directions:\nslice the pork chop\nfry the pork chop\nValid actions: chop pork chop | cook pork chop in stove"
    cut, cook = dict(IDENTITY_CUT, slice="chop", chop="slice"), dict(IDENTITY_COOK, fry="roast", roast="fry")
    assert rewrite_recipe(text, cut, cook) == (
        "Directions:\nchop the pork chop\nroast the pork chop\nValid actions: cook pork chop in oven | slice pork chop")
    with pytest.raises(ValueError, match="permutation"):
        rewrite_recipe(text, {"slice": "dice"}, IDENTITY_COOK)


def test_selfplay_records_are_played_once_and_read_back_as_played(tmp_path, monkeypatch):
    """Chapters 3 and 4 ask for the same MCTS games: the second call reads what the first played,
    and the examples built from the records read back are the examples of the records played."""
    from tutorial_lib import pipeline

    monkeypatch.setenv("TUTORIAL_CACHE", str(tmp_path))
    config = SelfPlayConfig(episodes=3, simulations=20, seed=5)
    played = pipeline.selfplay_records(config)
    calls = []
    monkeypatch.setattr(pipeline, "mcts_selfplay", lambda *a, **k: calls.append(a) or [])
    again = pipeline.selfplay_records(config)
    assert calls == [], "the cached games were played again"
    assert again == played
    assert tictactoe_examples(augment_with_symmetries(again)) == tictactoe_examples(augment_with_symmetries(played))
    other = pipeline.selfplay_records(SelfPlayConfig(episodes=3, simulations=20, seed=6))
    assert calls, "another config must be played, not read from the first one's file"
    assert other == []
