from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from tutorial_lib.envs.parsing import (
    normalise_command,
    parse_boxed_integer,
    parse_final_answer,
    parse_text_action,
    parse_tictactoe_move,
)

PARSERS = [parse_tictactoe_move, parse_boxed_integer, parse_final_answer, parse_text_action]

# Text that looks almost like an answer is where parsers break, so mix such fragments into the noise.
FRAGMENTS = st.sampled_from(
    ["<move>", "</move>", "x(", "o(", ",", ")", "\\boxed{", "}", "####", "$", "1,000", ".", "-", "9" * 30, "\n"]
)
NEAR_MISSES = st.lists(st.one_of(st.text(max_size=5), FRAGMENTS), max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), NEAR_MISSES))
def test_parsers_never_raise_and_explain_failures(text):
    for parse in PARSERS:
        result = parse(text)
        assert result.ok == (result.error is None)
        assert result.ok or result.value is None


@settings(max_examples=100, deadline=None)
@given(st.text(), st.lists(st.text(min_size=1), max_size=5))
def test_text_action_parser_never_raises_with_valid_actions(text, valid):
    result = parse_text_action(text, valid)
    assert not result.ok or result.value in valid


def test_parsers_reject_non_strings_without_raising():
    for parse in PARSERS:
        assert not parse(None).ok
        assert not parse(42).ok


def test_tictactoe_move_forms():
    assert parse_tictactoe_move("<move>x(1,2)</move>").value == "x(1,2)"
    assert parse_tictactoe_move("I play <move> O ( 0 , 2 ) </move> now").value == "o(0,2)"
    assert parse_tictactoe_move("x(2,0)").value == "x(2,0)"
    # the tagged move wins over an earlier bare one, and the first tagged move counts
    assert parse_tictactoe_move("x(0,0) <move>x(1,1)</move> <move>x(2,2)</move>").value == "x(1,1)"
    assert not parse_tictactoe_move("<move>x(1)</move>").ok
    assert not parse_tictactoe_move("middle square please").ok


def test_boxed_integer_reads_gems_form_in_the_last_box():
    assert parse_boxed_integer("maybe \\boxed{3}... no, \\boxed{7}").value == 7
    # GEM's pattern is \\boxed{(\\d+)}: a box that holds anything else is passed over
    assert parse_boxed_integer("\\boxed{3}... no, \\boxed{ 7 }").value == 3
    assert parse_boxed_integer("\\boxed{007}").value == 7
    assert not parse_boxed_integer("\\boxed{-4}").ok
    assert not parse_boxed_integer("\\boxed{seven}").ok
    assert not parse_boxed_integer("7").ok
    assert parse_boxed_integer("\\boxed{" + "9" * 40 + "}").value == int("9" * 40)  # out of range, not a format error


def test_final_answer_is_exact_and_tolerates_money_and_commas():
    assert parse_final_answer("so 3 + 4 = 7\n#### 7").value == 7
    assert parse_final_answer("#### $1,200").value == 1200
    assert parse_final_answer("#### 3.50").value == Fraction(7, 2)
    assert parse_final_answer("#### 1\n#### -2").value == -2
    assert not parse_final_answer("the answer is 7").ok
    assert not parse_final_answer("#### seven").ok


def test_numbers_too_long_for_int_are_parse_errors_not_exceptions():
    # int() and Fraction() refuse more than 4,300 digits (ValueError); a parser must not raise
    huge = "9" * 5000
    for parse, text, reason in [
        (parse_tictactoe_move, f"<move>o(2,{huge})</move>", "row/column number too long"),
        (parse_tictactoe_move, f"x({huge},1)", "row/column number too long"),
        (parse_boxed_integer, f"\\boxed{{{huge}}}", "number too long"),
        (parse_final_answer, f"#### ${huge}.5", "number too long"),
    ]:
        result = parse(text)
        assert not result.ok and reason in result.error
    assert parse_tictactoe_move("<move>x(000002,1)</move>").value == "x(2,1)"  # leading zeros: fine


def test_text_action_normalises_and_checks_membership():
    valid = ["take red potato", "open fridge"]
    assert parse_text_action("  Take  Red potato.\nthen eat it", valid).value == "take red potato"
    assert not parse_text_action("take blue potato", valid).ok
    assert not parse_text_action("\n\n  \n", valid).ok
    assert normalise_command(" Open   the DOOR. ") == "open the door"
