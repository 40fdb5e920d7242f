"""The morning-after view says what the nightly decided (issue 30).

``report_night_comparison`` is made again. Per series, the latest nightly is still put
against the nightly before it on the same GPU model, but that ratio of two medians is only
context (``night_ratio``): consecutive nights may run on different GPUs of the model and
several commits may land between them, and an interval built from the two runs' own CIs
excluded 1 on a quarter of the cases of a night that changed nothing. What moved is what
the nightly decided. Each row carries:

- ``decided``, the same night's outcome for the series (``regression``, ``improvement``,
  ``unconfirmed``, ``waiting``, ``checked_noise``), or ``not suspected``, with
  ``decided_rank`` to order by;
- that decision's evidence: the suspicion, and the A/B's own numbers (verdict, ratio, CI,
  p-value) over its own range (``ab_base_sha`` .. ``ab_head_sha``), which is not the
  previous nightly's commit when several commits landed;
- the regression's stored ``magnitude``, the one number the other panels show for it;
- what makes the comparison doubtful: ``behind_newest_h``, hours between this GPU model's
  latest nightly and the repository's newest (a pool whose nightly stopped is not last
  night), ``failed_between`` and ``failed_after``, nightly runs that failed between the two
  nights or after the latest, and ``same_gpu``, whether both nights ran on one device.

A view's change only: the view is defined in ``store/views/`` now, so this revision changes
nothing.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing to do: the view is store/views/report_night_comparison.sql."""


def downgrade() -> None:
    """Nothing to undo."""
