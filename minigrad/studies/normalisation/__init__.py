"""Loss normalisation (notebooks 02 and 03, the accumulation and loss-normalisation pages):
``explorer``, each micro-batch's share of the gradient under the item-weighted and the textbook
rule, and their measured error; ``figures``, each rule's error against the split and the
memory of adding losses against accumulating gradients."""
