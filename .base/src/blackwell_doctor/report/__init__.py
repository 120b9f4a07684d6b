"""Every document the tool writes (check report, bench run, model, fleet) and the one
outcome -> exit-code policy. Pure.
"""
