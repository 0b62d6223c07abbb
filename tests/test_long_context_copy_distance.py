"""experiments/long_context/copy_distance.py: how far back the nearest copy source of each byte lies."""

import pytest
from fakes import recipe_module

copy_distance = recipe_module("experiments/long_context/copy_distance.py")


def brute_force(doc: bytes, n: int) -> list[int]:
    out = []
    for i in range(len(doc)):
        found = [i - j for j in range(n, i) if doc[j - n : j + 1] == doc[i - n : i + 1]]
        out.append(min(found) if i >= n and found else 0)
    return out


@pytest.mark.parametrize("n", [1, 2, 3])
def test_distances_match_a_search_over_every_earlier_position(n):
    doc = b"abcabcabdabcXabcab cab"
    distances = copy_distance.copy_distances(doc, n)
    assert any(distances) and distances == brute_force(doc, n)


def test_the_nearest_source_wins_and_a_different_next_byte_is_no_source():
    doc = b"xyA" + b"-" * 10 + b"xyB" + b"xyA"
    d = copy_distance.copy_distances(doc, 2)
    assert d[-1] == 16  # "xyA" last seen 16 bytes back; the nearer "xyB" differs in the byte
    assert d[15] == 0  # "xyB": never seen


def test_shares_bucket_by_distance_and_sum_to_one():
    near = b"abcd" + b"abcd"  # sources 4 bytes back
    far = b"\x01\x02" + bytes(range(100, 200)) * 3 + b"\x01\x02"  # 302 bytes back
    s = copy_distance.shares([near, far], n=1, edges=(8, 256))
    assert list(s) == ["<= 8", "9-256", "> 256", "none"]
    assert sum(s.values()) == pytest.approx(1.0)
    total = len(near) + len(far)
    assert s["> 256"] == pytest.approx(1 / total)  # the last byte
    # the second and third runs of 100..199, 100 bytes back, but for the second run's first byte
    # (199 then 100 is new there)
    assert s["9-256"] == pytest.approx(199 / total)
    assert s["<= 8"] == pytest.approx(3 / total)  # "bcd" of the second "abcd"


def test_bad_n_is_one_line():
    with pytest.raises(ValueError, match="n must be >= 1"):
        copy_distance.copy_distances(b"abc", 0)


def test_main_writes_the_table(tmp_path):
    (tmp_path / "input.txt").write_bytes(b"the cat sat on the mat. " * 200)
    out = tmp_path / "table.md"
    table = copy_distance.main(
        ["--dataset", "tinyshakespeare", "--data-dir", str(tmp_path), "--split", "test",
         "--n", "4", "--out", str(out)]
    )  # fmt: skip
    assert out.read_text() == table
    assert "| 4 | " in table and "tinyshakespeare test" in table
