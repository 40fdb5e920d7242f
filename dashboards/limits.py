"""The limits alert rules fire at, shared with the panels that show the same numbers so a
stat turns red exactly when its alert fires."""

#: A regression untriaged for longer than this is a backlog reminder.
UNTRIAGED_DAYS = 3
#: A pool's GPU model without a nightly run for longer than this has missing data (a
#: nightly schedule plus two hours of slack).
NIGHTLY_MISSING_HOURS = 26
