"""The paper's propositions, checked numerically (``proofs``: random instances of every claim of
Section 3 and Appendix B), and a simulator of GRPO groups with a known answer (``simulate``)."""
