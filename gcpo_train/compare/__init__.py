"""``gcpo compare``: arms x seeds trained, evaluated and reported in one folder."""
