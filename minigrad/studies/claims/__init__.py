"""The articles' claims, tested (notebook 08, the claims page): ``verdicts``, the claims as
rows with verdicts; ``outcomes``, the rule a verdict on training outcomes meets (seeds,
lengths, mean and spread); ``figures``, full-batch against accumulated accuracy per model."""
