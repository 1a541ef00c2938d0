"""Stop sequences on streamed text (labs/engine/stop_strings.py): pure text, so these run in the light venv."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from labs.engine.stop_strings import StopStrings


def streamed(pieces: list[str], stops: tuple[str, ...]) -> tuple[str, bool]:
    cut = StopStrings(stops)
    sent = ""
    for index, piece in enumerate(pieces):
        sent += cut.feed(piece, final=index == len(pieces) - 1)
        if cut.hit:
            break
    return sent, cut.hit


def test_the_answer_ends_just_before_the_first_stop_and_never_shows_part_of_it() -> None:
    assert streamed(["1, 2", ", 3", ", 4"], (", 3",)) == ("1, 2", True)
    assert streamed(["Hello", " wor", "ld"], ("world", "lo w")) == ("Hel", True)
    cut = StopStrings(("END",))
    assert cut.feed("abcE", final=False) == "ab"  # "cE" may start "END": held back
    assert cut.feed("x", final=True) == "cEx" and not cut.hit


@given(
    st.lists(st.text(alphabet="ab, ", max_size=4), min_size=1, max_size=8),
    st.lists(st.text(alphabet="ab, ", min_size=1, max_size=3), max_size=3),
)
def test_any_split_sends_a_prefix_free_of_stops_that_ends_at_one(pieces: list[str], stop_list: list[str]) -> None:
    stops = tuple(stop_list)
    whole = "".join(pieces)
    sent, hit = streamed(pieces, stops)
    assert whole.startswith(sent) and not any(stop in sent for stop in stops)
    assert hit == any(stop in whole for stop in stops)
    if hit:
        assert any(whole[len(sent) :].startswith(stop) for stop in stops)
    else:
        assert sent == whole
