"""Contrastive losses (notebook 09, the contrastive page): ``scores``, retrieval accuracy and
the towers' gradient norms; ``explorer``, each strategy's gap to full batch. GradCache's
rounding bound is ``minigrad.analysis.contrastive_bound``'s."""
