"""The engine's automatic prefix cache, as vLLM's: chained hashes of full token blocks, LRU.

vLLM identifies a KV block by the hash of its parent block's hash and its own tokens, so a
block only matches when the whole prefix before it matches too; only full blocks are
cached, and a hit never covers the prompt's last token (it must be computed to sample the
first output). Hits are counted in tokens: ``vllm:prefix_cache_queries`` grows by the
prompt length of every request scheduled, ``vllm:prefix_cache_hits`` by its cached tokens.

Speculation: with EAGLE-style drafters vLLM drops the last matched block of every hit, so
the drafter recomputes the target's hidden states for it (``use_eagle`` in
``FullAttentionManager.find_longest_cache_hit``, vllm/v1/core/single_type_kv_cache_manager.py;
the RFC vllm-project/vllm#50438 proposes lookahead-aware hashing to remove that pop). That
is modelled here: an EAGLE engine reports one block fewer per hit. vLLM issue #14649 also
reports an 8-15 % shorter acceptance length for EAGLE/MTP heads that reuse approximated
hidden states; it is not modelled (acceptance stays per prompt class).

Capacity is the profile's KV budget in blocks: vLLM keeps freed blocks hashed in its free
pool until a new allocation evicts them, least recently used first.
"""

from __future__ import annotations

from collections import OrderedDict

BLOCK_SIZE = 16  # vLLM's default --block-size on GPU


def block_hashes(token_ids: list[int], block_size: int = BLOCK_SIZE) -> list[int]:
    """Chained hashes of the full blocks of ``token_ids`` (tuples of ints hash stably)."""
    out: list[int] = []
    parent = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, *token_ids[start : start + block_size]))
        out.append(parent)
    return out


class PrefixCache:
    """Which blocks an engine holds; LRU over ``capacity_blocks``."""

    def __init__(self, capacity_blocks: int, block_size: int = BLOCK_SIZE, *, eagle: bool) -> None:
        self.block_size = block_size
        self._capacity = max(capacity_blocks, 1)
        self._eagle = eagle
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.queries = 0  # prompt tokens looked up
        self.hits = 0  # of which cached

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, hashes: list[int], prompt_tokens: int) -> int:
        """Tokens of the prompt already cached (a multiple of the block size); touches them."""
        usable = min(len(hashes), (prompt_tokens - 1) // self.block_size)
        blocks = self._blocks
        hit = 0
        while hit < usable and hashes[hit] in blocks:
            blocks.move_to_end(hashes[hit])
            hit += 1
        if self._eagle and hit:
            hit -= 1
        self.queries += prompt_tokens
        self.hits += hit * self.block_size
        return hit * self.block_size

    def insert(self, hashes: list[int]) -> None:
        """Cache a computed prompt's blocks, evicting the least recently used beyond capacity."""
        blocks = self._blocks
        for h in hashes:
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > self._capacity:
            blocks.popitem(last=False)
