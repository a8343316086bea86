"""The certificate's gap as the table prints it: an unproven mapping never reads as '<=0%'."""
import pytest

from accelmap.report.model_report import gap_text


@pytest.mark.parametrize(("gap", "proven", "text"), [
    (None, False, "-"),
    (0.0, True, "0%"),
    (0.0039, False, "<=0.4%"),    # ResNet-18 fc on eyeriss_like at 10 s: printed '<=0%' before
    (0.0003, False, "<0.1%"),
    (0.75, False, "<=75%"),
    (12.0, False, "<=13x"),
])
def test_gap_text(gap, proven, text):
    assert gap_text(gap, proven) == text
