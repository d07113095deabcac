"""helpers.tables accepts a last-digit rounding of a committed CSV table and nothing more."""

from helpers.tables import same_csv, same_file

TABLE = b"arm,delta,verdict\nbot_rd,-0.003618285177,inconclusive\nnone,,\n"


def test_a_last_digit_rounding_is_the_same_table():
    assert same_csv(TABLE, TABLE.replace(b"-0.003618285177", b"-0.003618285178"))


def test_a_real_change_is_another_table():
    assert not same_csv(TABLE, TABLE.replace(b"-0.003618285177", b"-0.003618290000"))  # 1.3e-6 relative
    assert not same_csv(TABLE, TABLE.replace(b"inconclusive", b"better"))
    assert not same_csv(TABLE, TABLE.replace(b"arm,delta", b"arm,delta_low"))
    assert not same_csv(TABLE, TABLE + b"extra,1,x\n")
    assert not same_csv(TABLE, TABLE.replace(b"none,,", b"none,0.0,"))  # a missing value is not 0


def test_other_files_are_compared_byte_for_byte():
    assert same_file("summary.md", b"| a |", b"| a |")
    assert not same_file("summary.md", b"0.003618285177", b"0.003618285178")
