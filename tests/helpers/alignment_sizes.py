"""Small bootstrap and batch counts for the update-alignment tests on tiny pools: the committed
study's 20,000 batches and 1,000 replicates cost minutes per snapshot, and a test of the
machinery does not need them (each restat in a test still runs with one set of sizes)."""


def small_alignment_sizes(monkeypatch) -> None:
    from gcpo_analysis.study import alignment

    for name, value in (("N_BATCHES", 300), ("N_BOOT", 60), ("N_BOOT_BATCHES", 100), ("N_BOOT_BATCHES_OTHER", 50)):
        monkeypatch.setattr(alignment, name, value)
