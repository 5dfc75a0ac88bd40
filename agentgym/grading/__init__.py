"""Grading what an agent said: answers against gold and facts told to a user.

``answers`` (SQuAD normalisation, exact match, substring match, token F1, answers found in free text, numbers, dates
and calls written the ways people write them) and ``facts`` (whether a reply states a fact by value: money, times,
dates, card digits). Envs and reward methods share these, so an env's success and a reward's score agree.

May import: agentgym.contract.
"""
