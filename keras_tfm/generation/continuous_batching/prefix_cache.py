"""Which prompt blocks the prefix cache holds: the host side of its pool.

The keys and values of a prompt's whole blocks of `block_size` tokens are
kept in a pool of `num_blocks` blocks (on the device, `SlotDecoder`'s), so
that a later prompt that starts with the same tokens copies them instead
of computing them again (vLLM's automatic prefix caching). A block's keys
and values depend on every token before it, so a block is named by its
parent block and its own tokens: a chain from the prompt's start, and two
prompts share a block exactly when they share every token up to its end.
Only whole blocks are kept (a partial one would change with the tokens
that complete it). A finished answer's blocks are kept too (its prompt
followed by its tokens, `SlotDecoder.keep`): a conversation's next turn
starts with them.

Keys are exact (the parent's entry number and the block's token tuple,
compared in full by the dict), where vLLM hashes them: no collision can
hand a prompt another prompt's keys. When the pool is full, the least
recently used block is evicted; a match refreshes its chain from the last
block to the first, so a chain's first blocks (the most shared: a system
prompt) outlive its last ones, and a child is never kept longer than its
parent needs it.
"""

from collections import OrderedDict

from keras_tfm.validation import check_positive_int

_ROOT = 0  # the parent of a prompt's first block


class PrefixCache:
    """An LRU index of the pool's blocks, keyed by their token chains.

    Args:
        num_blocks: the pool's size in blocks.
        block_size: tokens per block.

    Example:
    >>> cache = PrefixCache(num_blocks=4, block_size=2)
    >>> cache.match([1, 2, 3, 4, 5])
    []
    >>> cache.store([1, 2, 3, 4, 5], matched=0)  # (block index, pool block)
    [(0, 0), (1, 1)]
    >>> cache.match([1, 2, 3, 9, 9])  # the first block only
    [0]
    """

    def __init__(self, num_blocks, block_size):
        self.num_blocks = check_positive_int("num_blocks", num_blocks)
        self.block_size = check_positive_int("block_size", block_size)
        # (parent entry, block tokens) -> (entry, pool block); least
        # recently used first. Entries are numbered once, never reused, so
        # an evicted parent's children can no longer be reached.
        self._blocks = OrderedDict()
        self._free = list(range(num_blocks - 1, -1, -1))  # pop() gives 0 first
        self._entries = 0

    def __len__(self):
        """The number of blocks held."""
        return len(self._blocks)

    def _keys(self, prompt, count):
        """The first `count` block keys of `prompt` whose parents are held,
        as `(key, (entry, pool block) or None)`, stopping at the first
        block not held (its key is the last one returned)."""
        parent, size = _ROOT, self.block_size
        for i in range(count):
            key = (parent, tuple(prompt[i * size : (i + 1) * size]))
            found = self._blocks.get(key)
            yield key, found
            if found is None:
                return
            parent = found[0]

    def match(self, prompt):
        """The pool blocks of the longest chain of `prompt`'s whole blocks
        held (the last token left out: it is prefilled for its logits),
        refreshed as most recently used; [] when none."""
        count = (len(prompt) - 1) // self.block_size
        chain = []
        for key, found in self._keys(prompt, count):
            if found is None:
                break
            chain.append(key)
        self._refresh(chain)
        return [self._blocks[key][1] for key in chain]

    def store(self, prompt, matched):
        """Claims pool blocks for `prompt`'s whole blocks after its first
        `matched` (those `match` found) that the pool does not hold yet:
        `[(block index, pool block)]`, in order, evicting the least recently
        used blocks when the pool is full (never the prompt's own: at most
        `num_blocks` blocks of it are kept). The caller writes their keys
        and values, or calls `discard` with the same list if it could not."""
        count = len(prompt) // self.block_size
        keys = list(self._keys(prompt, count))
        chain = [key for key, found in keys if found is not None][:matched]
        if len(chain) < matched:
            raise ValueError(
                f"`matched` must be at most the {len(chain)} blocks of the "
                f"prompt held. Received: matched={matched}"
            )
        self._refresh(chain)  # the matched blocks are never evicted here
        parent = self._blocks[chain[-1]][0] if chain else _ROOT
        claimed, size = [], self.block_size
        for i in range(matched, min(count, self.num_blocks)):
            key = (parent, tuple(prompt[i * size : (i + 1) * size]))
            found = self._blocks.get(key)
            if found is not None:  # held already (e.g. a prompt's last block)
                self._blocks.move_to_end(key)  # not evicted by this loop
                chain.append(key)
                parent = found[0]
                continue
            if not self._free:
                _, (_, block) = self._blocks.popitem(last=False)
                self._free.append(block)
            self._entries += 1
            block = self._free.pop()
            self._blocks[key] = (self._entries, block)
            chain.append(key)
            claimed.append((i, block))
            parent = self._entries
        self._refresh(chain)
        return claimed

    def discard(self, prompt, claimed):
        """Forgets the blocks `store` claimed for `prompt` (unwritten)."""
        blocks = {block for _, block in claimed}
        for key, (_, block) in list(self._blocks.items()):
            if block in blocks:
                del self._blocks[key]
                self._free.append(block)

    def _refresh(self, chain):
        # Last block first: the chain's first block ends most recent.
        for key in reversed(chain):
            self._blocks.move_to_end(key)
