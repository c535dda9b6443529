from __future__ import annotations

from decimal import Decimal

from jobstream.usage import Usage, summed


def test_a_sum_adds_every_count_and_names_each_model_once_sorted() -> None:
    parts = [
        Usage(3, 5, Decimal("0.1"), cache_read_tokens=2, price_source="catalogue", model="m-b"),
        Usage(1, 1, Decimal("0.2"), cost_known=False, price_source="default", model="m-a"),
        Usage(2, 0, Decimal(0), price_source="catalogue", model="m-b, m-a"),
        Usage(),  # a call no price was found for
    ]
    total = summed(parts)
    assert (total.input_tokens, total.output_tokens, total.cost_usd) == (6, 6, Decimal("0.3"))
    assert (total.cache_read_tokens, total.cost_known) == (2, False)
    assert (total.price_source, total.model) == ("default", "m-a, m-b")
    # The same set in another order is the same label: spend by model groups them as one.
    assert summed(list(reversed(parts))).model == total.model


def test_one_part_is_itself_and_none_has_no_model() -> None:
    one = Usage(1, 2, Decimal("0.5"), model="m")
    assert summed([one]) is one
    assert summed([]) == Usage()  # a step that made no call: a known zero
    assert summed([Usage(), Usage()]).model is None
