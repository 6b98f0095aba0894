"""Pod groups and gangs (seed 003): where a group's members go, and holding that place for them.

- :mod:`.layout`: the plan of a whole group over the nodes (fewest nodes, best GPU sets), asked on
  scratch copies of the nodes, never the live state;
- :mod:`.plan`: a plan's slots and the planner's decisions (bind, wait, refuse);
- :mod:`.planner`: :class:`GroupPlanner`, which holds a plan's devices until its members come and
  binds a gang all or nothing.
"""

from devshare.engine.groups.layout import Layout, choose_nodes, gpu_minors, plan_layout, what_if
from devshare.engine.groups.plan import PLAN, Bind, Decision, MemberPlacement, Refuse, Wait, quorum_of
from devshare.engine.groups.planner import DEFAULT_PLAN_TTL, GroupPlanner

__all__ = ["DEFAULT_PLAN_TTL", "PLAN", "Bind", "Decision", "GroupPlanner", "Layout", "MemberPlacement", "Refuse",
           "Wait", "choose_nodes", "gpu_minors", "plan_layout", "quorum_of", "what_if"]
