"""The directory of a Hoplite-style tree: who serves whom, decided while the transfer runs.

The PS keeps one per iteration (:mod:`harness.hosts.tree` runs it; docs/collectives.md draws the
whole pattern). A worker that is ready asks for a parent; the directory names the live node
nearest the PS that still has a free slot (``root_fanout`` at the PS, ``fanout`` at a worker;
ties: the one that asked first), and the asker becomes a holder in turn, so a fast worker ends
up near the root and a slow one at a leaf. A receiver that got nothing from its parent in time
reports it: the parent is marked dead, its slot at its own parent freed, and the receiver gets
a new parent among the live holders outside its own subtree; a node blamed by mistake (its own
parent had died) comes back when it speaks. Nothing here opens a socket: the tests drive it.
"""


from __future__ import annotations

import dataclasses

ROOT = -1   # the PS's place in the tree; workers are 0 .. N-1


class TreeError(RuntimeError):
    """The directory cannot name a parent (every holder is dead or full)."""


@dataclasses.dataclass
class _Node:
    depth: int
    asked: int                      # the order in which the node asked (the root: -1)
    parent: int | None
    children: list[int] = dataclasses.field(default_factory=list)
    dead: bool = False


class Directory:
    """One iteration's tree: who holds the object, who serves whom, who failed."""

    def __init__(self, fanout: int = 2, root_fanout: int = 1) -> None:
        if fanout < 1 or root_fanout < 1:
            raise ValueError(f"fan-outs must be at least 1, not {fanout} and {root_fanout}.")
        self.fanout, self.root_fanout = fanout, root_fanout
        self.nodes: dict[int, _Node] = {ROOT: _Node(0, -1, None)}
        self.reformed = 0   # receivers given a new parent after a failure

    def _slots(self, node: int) -> int:
        return self.root_fanout if node == ROOT else self.fanout

    def _best_holder(self, exclude: set[int]) -> int:
        free = [(n.depth, n.asked, k) for k, n in self.nodes.items()
                if not n.dead and k not in exclude and len(n.children) < self._slots(k)]
        if not free:
            raise TreeError("no live holder has a free slot: the tree cannot grow.")
        return min(free)[2]

    def _subtree(self, node: int) -> set[int]:
        out, todo = set(), [node]
        while todo:
            k = todo.pop()
            out.add(k)
            todo += self.nodes[k].children
        return out

    def ask(self, worker: int) -> int:
        """``worker`` is ready: the node it fetches from (the PS is :data:`ROOT`)."""
        if worker in self.nodes:
            raise ValueError(f"worker {worker} asked twice in one iteration.")
        parent = self._best_holder(exclude=set())
        self._attach(worker, parent, asked=len(self.nodes) - 1)
        return parent

    def _attach(self, worker: int, parent: int, asked: int) -> None:
        p = self.nodes[parent]
        p.children.append(worker)
        node = self.nodes.get(worker)
        if node is None:
            self.nodes[worker] = _Node(p.depth + 1, asked, parent)
        else:
            node.parent = parent
            self._deepen(worker, p.depth + 1)

    def _deepen(self, node: int, depth: int) -> None:
        self.nodes[node].depth = depth
        for child in self.nodes[node].children:
            self._deepen(child, depth + 1)

    def failed(self, worker: int, parent: int) -> int:
        """``worker`` got nothing from ``parent`` in time: mark ``parent`` dead and return
        ``worker``'s new parent (a live holder outside ``worker``'s own subtree)."""
        if parent == ROOT:
            raise TreeError("the PS itself stopped serving; the run cannot go on without it.")
        me = self.nodes[worker]
        me.dead = False   # it is talking: a child that blamed it while it waited was wrong
        if me.parent != parent:
            return me.parent   # already moved (reported twice)
        dead = self.nodes[parent]
        if not dead.dead:   # its own parent's slot is free again
            dead.dead = True
            self.nodes[dead.parent].children.remove(parent)
        if worker in dead.children:   # not when it already left a node blamed by mistake
            dead.children.remove(worker)
        new = self._best_holder(exclude=self._subtree(worker))
        self._attach(worker, new, me.asked)
        self.reformed += 1
        return new

    def parent(self, worker: int) -> int | None:
        """Whom ``worker`` fetches from now (None: it has not asked)."""
        node = self.nodes.get(worker)
        return node.parent if node else None

    def children(self, node: int) -> list[int]:
        """Whom ``node`` serves now, in the order they attached."""
        return list(self.nodes[node].children) if node in self.nodes else []

    def live(self) -> list[int]:
        """Workers in the tree that are not known dead, in the order they asked."""
        return [k for k, n in sorted(self.nodes.items(), key=lambda kv: kv[1].asked)
                if k != ROOT and not n.dead]

    def height(self, node: int) -> int:
        """How many levels of live workers hang below ``node`` (0 for a leaf)."""
        kids = [k for k in self.children(node) if not self.nodes[k].dead]
        return 1 + max(self.height(k) for k in kids) if kids else 0

    def depth(self) -> int:
        """The deepest live worker's distance from the PS (the pipeline's length in hops)."""
        return max((n.depth for k, n in self.nodes.items() if k != ROOT and not n.dead),
                   default=0)


