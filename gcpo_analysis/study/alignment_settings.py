"""The update-alignment study's fixed settings, shared by its statistics (``study.alignment``) and
its tables (``study.alignment_tables``), which import them from here rather than from each other."""

PROTOCOL_BATCH = 4  # queries_per_step of the NarrativeQA-spans protocol
LEVEL = 0.95
HEADLINE = ("se", "kle", "care", "rd", "cd_rd", "bot_rd", "q_hawkeye")
FIELD = ("reward_std", "inv_reward_std", "inv_grad_norm", "inv_variance")  # measures.field_weights
