import pytest
import torch

from tutorial_lib.lm.prompts import Turn, build_messages, render_chat
from tutorial_lib.lm.tokenization import (
    IGNORE_INDEX,
    boundary_mismatch,
    collate_examples,
    encode_prompt_completion,
    left_padded_batch,
    pad_prompt_ids,
    shared_prefixes,
)


def test_prompt_is_masked_and_completion_ends_with_eos(tiny_policy):
    tok = tiny_policy.tokenizer
    prompt = render_chat(tok, build_messages("tictactoe", "Play x.", [Turn("Board:\n. . .\n. . .\n. . .")]))
    example = encode_prompt_completion(tok, prompt, "<move>x(1,1)</move>")
    prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    n = len(prompt_ids)
    assert example["input_ids"][:n] == prompt_ids  # exactly the ids generation starts from
    assert example["labels"][:n] == [IGNORE_INDEX] * n
    assert example["labels"][n:] == example["input_ids"][n:]
    assert example["labels"][-1] == tok.eos_token_id
    assert tok.decode(example["input_ids"][n:], skip_special_tokens=True) == "<move>x(1,1)</move>"


def test_the_token_boundary_pitfall(tiny_policy):
    tok = tiny_policy.tokenizer
    # Joint tokenisation merges the prompt's trailing space into the completion's first token...
    mismatch = boundary_mismatch(tok, "Your command: ", "take knife")
    assert mismatch is not None and mismatch["together"] != mismatch["separately"]
    # ...which the library avoids: the completion's ids follow the prompt's own ids unchanged.
    example = encode_prompt_completion(tok, "Your command: ", "take knife", add_eos=False)
    assert example["input_ids"] == tok("Your command: ")["input_ids"] + tok("take knife")["input_ids"]
    # A chat prompt ends in a newline after the assistant tag, where the two agree.
    chat_prompt = render_chat(tok, [{"role": "user", "content": "go"}])
    assert boundary_mismatch(tok, chat_prompt, "take knife") is None


def test_max_length_cuts_the_oldest_prompt_tokens_never_the_completion(tiny_policy):
    tok = tiny_policy.tokenizer
    full = encode_prompt_completion(tok, "one two three four five six seven", " eight")
    limit = sum(label != IGNORE_INDEX for label in full["labels"]) + 2  # the completion and two more
    cut = encode_prompt_completion(tok, "one two three four five six seven", " eight", max_length=limit)
    assert len(cut["input_ids"]) == limit
    assert cut["input_ids"] == full["input_ids"][-limit:]
    assert [t for t in cut["labels"] if t != IGNORE_INDEX] == [t for t in full["labels"] if t != IGNORE_INDEX]


def test_collate_right_pads_with_ignored_labels(tiny_policy):
    tok = tiny_policy.tokenizer
    a = encode_prompt_completion(tok, "short ", "x")
    b = encode_prompt_completion(tok, "a much longer prompt than the first ", "y")
    batch = collate_examples([a, b], tok.pad_token_id)
    width = len(b["input_ids"])
    assert batch["input_ids"].shape == (2, width)
    pad = width - len(a["input_ids"])
    assert batch["attention_mask"][0, -pad:].sum() == 0
    assert (batch["labels"][0, -pad:] == IGNORE_INDEX).all()


def test_left_padding_puts_every_prompt_end_in_the_last_column(tiny_policy):
    tok = tiny_policy.tokenizer
    batch = left_padded_batch(tok, ["a", "a much longer prompt"])
    assert batch["attention_mask"][:, -1].tolist() == [1, 1]
    assert batch["attention_mask"][0, 0] == 0 and batch["input_ids"][0, 0] == tok.pad_token_id
    assert tok.padding_side == "right"  # restored


def test_padded_and_unpadded_generation_agree(tiny_policy):
    """Left padding plus the attention mask must not change what the model writes."""
    prompts = ["Turn 1 of 4. Make your first guess.", "Board:\n. . .\n. x .\n. . o\n\nAnswer as"]
    together = tiny_policy.generate(prompts, max_new_tokens=8)
    alone = [tiny_policy.generate([p], max_new_tokens=8)[0] for p in prompts]
    assert together == alone
    assert isinstance(torch.tensor([1]), torch.Tensor)


def test_a_shared_prefix_keeps_its_columns_and_padding_goes_after_it():
    rows = [[7, 8, 9, 1], [7, 8, 9, 2, 3, 4], [7, 8, 9, 5, 6]]
    batch = pad_prompt_ids(rows, pad_token_id=0, shared_prefix=3)
    assert batch["input_ids"].tolist() == [[7, 8, 9, 0, 0, 1], [7, 8, 9, 2, 3, 4], [7, 8, 9, 0, 5, 6]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0, 1], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 1, 1]]
    plain = pad_prompt_ids(rows, pad_token_id=0)
    assert plain["input_ids"][0].tolist() == [0, 0, 7, 8, 9, 1]
    with pytest.raises(ValueError, match="a token after"):
        pad_prompt_ids([[1, 2], [1, 2, 3]], pad_token_id=0, shared_prefix=2)


def test_shared_prefixes_pick_the_start_that_saves_most():
    assert shared_prefixes([[7, 8, 9, 1], [7, 8, 9, 2, 3, 4], [7, 8, 9, 5, 6]]) == (3, [0, 0, 0])
    assert shared_prefixes([[1, 2], [1, 2]]) == (1, [0, 0])  # each row keeps a token of its own
    # two versions of a long start (x and o): worth sharing per version
    x, o = [5, 1] + list(range(10, 30)), [5, 2] + list(range(10, 30))
    length, groups = shared_prefixes([x + [1], o + [2], x + [3, 3], o + [4]])
    assert length == 22 and groups == [0, 1, 0, 1]
    # all different from the first token: nothing to share
    assert shared_prefixes([[1, 2], [2, 2], [3, 2]]) == (0, [0, 0, 0])
    # more distinct starts than allowed: only the part before they split
    rows = [[9, i, 0, 0] for i in range(6)]
    assert shared_prefixes(rows, max_groups=4) == (1, [0] * 6)
