"""A plain-Python reader and forger of topicmatch's mapped image (file format
versions 3 and 4, csrc/serial/fs_image_write.c), for the hostile-image tests.

It knows the layout from csrc/serial/fs_image_root.h, csrc/serial/fs_header.h and
csrc/index/fs_layout.h, not from the library: a 48-byte header, the root block at 48 (struct img_root), the
objects from 1024 (fs_level, fs_slot arrays with their bitmaps, fs_node with
an fs_link before trie nodes, ids, queue groups), then the checksum of
[0, 48 + P) (image_checksum: version 3's one XXH64, version 4's of blocks).  `Image.parse` walks every object reachable from the root
block and records where each field lies, so that a test can change one
field and `seal()` the image again with a valid checksum.
"""
import struct

from xxh64 import M64, xxh64

MAGIC = b"\x89FSB\r\n\x1a\n"
CHECKSUM_BLOCK = 1 << 20         # version 4's (docs/FORMAT.md, "Checksum")


def image_checksum(data):
    """The checksum of data, an image's bytes before its checksum, as the
    version in its header sums them: version 3 in one XXH64; version 4 the
    XXH64 of the XXH64s of its 1 MiB blocks, each as 8 little-endian bytes."""
    data = bytes(data)
    version = struct.unpack_from("<H", data, 8)[0] if len(data) >= 10 else 0
    if version < 4:
        return xxh64(data)
    return xxh64(b"".join(struct.pack("<Q", xxh64(data[k:k + CHECKSUM_BLOCK]))
                          for k in range(0, len(data), CHECKSUM_BLOCK)))
HEADER = 48
OBJECTS = 1024
SHAPE_MAX = 64
SHAPE_MAX_TOKENS = 48
NPROBE = SHAPE_MAX_TOKENS + 2
DIALECT_CODE = {"nats": 0, "mqtt": 1, "amqp": 2}

# struct img_root (fs_image_root.h), from offset 48
ROOT_NODES = HEADER
ROOT_ROOT = HEADER + 8
ROOT_LITERALS = HEADER + 16
ROOT_OBJECTS_END = HEADER + 24
ROOT_NSHAPES = HEADER + 32
ROOT_SHAPE = HEADER + 40                     # u64[64]
ROOT_PROBE = ROOT_SHAPE + 8 * SHAPE_MAX      # u64[50]
ROOT_END = ROOT_PROBE + 8 * NPROBE           # 1000: the rest up to 1024 is padding

# fs_level (56 bytes): slots u64, cap u32, count u32, one u64, rest u64, filter u64, filter_mask u64, stale u32
LEVEL = struct.Struct("<QIIQQQQI4x")
LV_SLOTS, LV_CAP, LV_COUNT, LV_ONE, LV_REST, LV_FILTER, LV_MASK, LV_STALE = 0, 8, 12, 16, 24, 32, 40, 48
# fs_slot: hash u32, len u32, node u64
SLOT = struct.Struct("<IIQ")
# fs_node: subs i64, groups u64, nsubs u32, subcap u32, hash u32, toklen u16, kind u8, linked u8, tok[]
NODE = struct.Struct("<qQIIIHBB")
ND_SUBS, ND_GROUPS, ND_NSUBS, ND_SUBCAP, ND_HASH, ND_TOKLEN, ND_KIND, ND_LINKED = 0, 8, 16, 20, 24, 28, 30, 31
# fs_link, 16 bytes before a trie node: parent u64, next u64
LINK = struct.Struct("<QQ")
# fs_shape (80 bytes): fs_level table, onemask u64, ntoks u32, rest u32, first_wild u32
SHAPE_TAIL = struct.Struct("<QIII4x")
SH_ONEMASK, SH_NTOKS, SH_REST, SH_FIRST_WILD = 56, 64, 68, 72
# fs_groups: n u32, cap u32, then fs_group: name u64, ids u64, name_len, name_hash, n, cap (u32)
GROUPS = struct.Struct("<II")
GROUP = struct.Struct("<QQIIII")

TOK_LITERAL, TOK_ONE, TOK_REST, NODE_SHAPED = 0, 1, 2, 3
LINK_TRIE, LINK_IMAGE = 1, 2


def fs_hash(b):
    """csrc/rules/fs_token.h's fs_hash: a token's (or queue name's) 32-bit hash."""
    b = bytes(b)
    n = len(b)
    h = 0x9E3779B97F4A7C15 ^ n
    i = 0
    while n - i >= 8:
        h = ((h ^ int.from_bytes(b[i:i + 8], "little")) * 0xbf58476d1ce4e5b9) & M64
        h ^= h >> 31
        i += 8
    v = int.from_bytes(b[i:], "little")
    h = ((h ^ v) * 0x94d049bb133111eb) & M64
    h ^= h >> 32
    h = (h * 0xbf58476d1ce4e5b9) & M64
    return h >> 32


def tok_alloc(n):
    return (n + 7) & ~7


class Node:
    def __init__(self, img, off, trie):
        self.off = off
        self.trie = trie
        (self.subs, self.groups, self.nsubs, self.subcap, self.hash, self.toklen, self.kind,
         self.linked) = NODE.unpack_from(img.b, off)
        self.tok = bytes(img.b[off + 32:off + 32 + self.toklen])
        self.parent = self.next = None
        if trie:
            self.parent, self.next = LINK.unpack_from(img.b, off - 16)
        self.ids_off = off + self.subs if self.subcap > 1 else off + ND_SUBS
        self.ids = list(struct.unpack_from(f"<{self.nsubs}q", img.b, self.ids_off))
        self.group_list = []           # (group offset, name, ids, ids offset)
        if self.groups:
            G = off + self.groups
            n, _ = GROUPS.unpack_from(img.b, G)
            for i in range(n):
                g = G + 8 + 32 * i
                name, ids, name_len, _h, m, _cap = GROUP.unpack_from(img.b, g)
                self.group_list.append((g, bytes(img.b[g + name:g + name + name_len]),
                                        list(struct.unpack_from(f"<{m}q", img.b, g + ids)), g + ids))

    @property
    def link(self):
        return self.off - 16


class Level:
    def __init__(self, img, off):
        self.off = off
        (self.slots, self.cap, self.count, self.one, self.rest, self.filter, self.filter_mask,
         self.stale) = LEVEL.unpack_from(img.b, off)
        self.slot_list = []            # (slot offset, hash, len, node offset), occupied slots only
        for i in range(self.cap):
            s = self.slots + 16 * i
            h, ln, node = SLOT.unpack_from(img.b, s)
            if node:
                self.slot_list.append((s, h, ln, node))


class Shape:
    def __init__(self, img, off):
        self.off = off
        self.table = Level(img, off)
        self.onemask, self.ntoks, self.rest, self.first_wild = SHAPE_TAIL.unpack_from(img.b, off + SH_ONEMASK)


class Image:
    """A parsed image: header and root fields, every reachable node and level."""

    def __init__(self, data):
        self.b = bytearray(data)
        b = self.b
        assert b[:8] == MAGIC
        self.version, self.dialect_code, _reserved, self.P, self.subs, self.literals, self.nodes = \
            struct.unpack_from("<HHIQQQQ", b, 8)
        self.root_nodes, self.root, self.lit, self.objects_end, self.nshapes = struct.unpack_from("<5Q", b, HEADER)
        self.shape_offs = list(struct.unpack_from(f"<{SHAPE_MAX}Q", b, ROOT_SHAPE))[:self.nshapes]
        self.probe = list(struct.unpack_from(f"<{NPROBE}Q", b, ROOT_PROBE))
        self.node = {}                 # offset -> Node
        self.level = {}                # offset -> Level
        self.trie_nodes, self.entries = [], []
        self.lit_level = self._level(self.lit)
        for _, _, _, n in self.lit_level.slot_list:
            self.entries.append(self._node(n, False))
        self.shapes = [Shape(self, off) for off in self.shape_offs]
        for sh in self.shapes:
            self.level[sh.off] = sh.table
            for _, _, _, n in sh.table.slot_list:
                self.entries.append(self._node(n, False))
        stack = [self.root]
        while stack:
            x = self._node(stack.pop(), True)
            self.trie_nodes.append(x)
            if x.next:
                L = self._level(x.next)
                stack += [n for _, _, _, n in L.slot_list] + [c for c in (L.one, L.rest) if c]

    def _node(self, off, trie):
        n = self.node[off] = Node(self, off, trie)
        return n

    def _level(self, off):
        L = self.level[off] = Level(self, off)
        return L

    # ---------------------------------------------------------- editing
    def u(self, fmt, off):
        return struct.unpack_from(fmt, self.b, off)[0]

    def put(self, fmt, off, v):
        struct.pack_into(fmt, self.b, off, v)

    def put64(self, off, v):
        self.put("<Q", off, v & (1 << 64) - 1)

    def put32(self, off, v):
        self.put("<I", off, v & 0xFFFFFFFF)

    def seal(self):
        """The bytes with the checksum recomputed (a forged, 'valid' image)."""
        end = len(self.b) - 8
        struct.pack_into("<Q", self.b, end, image_checksum(self.b[:end]))
        return bytes(self.b)

    def raw(self):
        return bytes(self.b)

    # ---------------------------------------------------------- queries
    def field_at(self, pos):
        """What the byte at pos belongs to: (object, field), e.g. ("trie node",
        "toklen"), ("shape", "ntoks"), ("slot", "node"); ("root", field) for the
        root block; ("unreached", "") for bytes no object covers."""
        if pos < HEADER:
            return "header", str(pos)
        if pos < OBJECTS:
            names = [(ROOT_NODES, "nodes"), (ROOT_ROOT, "root"), (ROOT_LITERALS, "literals"),
                     (ROOT_OBJECTS_END, "objects_end"), (ROOT_NSHAPES, "nshapes"), (ROOT_SHAPE, "shape"),
                     (ROOT_PROBE, "probe"), (ROOT_END, "padding")]
            return "root", [nm for at, nm in names if at <= pos][-1]
        if pos >= len(self.b) - 8:
            return "checksum", ""
        for o, n in self.node.items():
            what = ("wildcard " if n.kind in (TOK_ONE, TOK_REST) else "") + ("trie node" if n.trie else "entry")
            if n.trie and o - 16 <= pos < o:
                return what, "link.parent" if pos < o - 8 else "link.next"
            if o <= pos < o + 32 + tok_alloc(n.toklen):
                fields = [(0, "subs"), (8, "groups"), (16, "nsubs"), (20, "subcap"), (24, "hash"),
                          (28, "toklen"), (30, "kind"), (31, "linked"), (32, "tok")]
                return what, [nm for at, nm in fields if at <= pos - o][-1]
            if n.subcap > 1 and n.ids_off <= pos < n.ids_off + 8 * n.nsubs:
                return what, "ids"
            if n.groups and o + n.groups <= pos < o + n.groups + 8:
                return what, "groups.n"
            for g, name, ids, idoff in n.group_list:
                if g <= pos < g + 32:
                    return what, "group." + ["name", "ids", "name_len", "name_hash", "n", "cap"][
                        [0, 8, 16, 20, 24, 28].index(max(x for x in (0, 8, 16, 20, 24, 28) if x <= pos - g))]
                if idoff <= pos < idoff + 8 * len(ids):
                    return what, "group.ids"
                name_at = g + self.u("<Q", g)
                if name_at <= pos < name_at + tok_alloc(max(len(name), 1)):
                    return what, "group.name bytes"
        for o, L in self.level.items():
            size = 80 if o in self.shape_offs else 56
            if o <= pos < o + size:
                fields = [(0, "slots"), (8, "cap"), (12, "count"), (16, "one"), (24, "rest"), (32, "filter"),
                          (40, "filter_mask"), (48, "stale"), (56, "onemask"), (64, "ntoks"), (68, "rest"),
                          (72, "first_wild")]
                return ("shape" if size == 80 else "level"), [nm for at, nm in fields if at <= pos - o][-1]
            if L.cap and L.slots <= pos < L.slots + 16 * L.cap:
                return "slot", ["hash", "len", "node"][min((pos - L.slots) % 16 // 4, 2)]
            if L.filter and L.filter <= pos < L.filter + (L.filter_mask + 1) // 8:
                return "bitmap", ""
        return "unreached", ""

    def path(self, n):
        """A trie node's tokens from the root down (a tuple of bytes)."""
        toks = []
        while n.off != self.root:
            toks.append(n.tok)
            n = self.node[n.parent]
        return tuple(reversed(toks))

    def trie(self, *toks):
        """The trie node at this path of tokens (str or bytes)."""
        want = tuple(t.encode() if isinstance(t, str) else t for t in toks)
        return next(n for n in self.trie_nodes if n.off != self.root and self.path(n) == want)

    def entry(self, tok):
        """The literal-table or shape-table entry of this whole filter."""
        tok = tok.encode() if isinstance(tok, str) else tok
        return next(n for n in self.entries if n.tok == tok)

    def table_of(self, n):
        """The level whose slots hold entry or trie node n."""
        return next(L for L in self.level.values() if any(x == n.off for _, _, _, x in L.slot_list))

    def slot_of(self, n):
        """The offset of the slot that holds n."""
        L = self.table_of(n)
        return next(s for s, _, _, x in L.slot_list if x == n.off)

    def empty_slots(self, L):
        return [L.slots + 16 * i for i in range(L.cap) if not self.u("<Q", L.slots + 16 * i + 8)]

    def shape_holding(self, n):
        return next(sh for sh in self.shapes if any(x == n.off for _, _, _, x in sh.table.slot_list))

    def append(self, size):
        """Room for size more bytes (zeroed, 8-aligned) at the end of the
        objects, the header's payload length and the root block's objects'
        end grown to hold them: their offset."""
        at = len(self.b) - 8
        size = (size + 7) & ~7
        self.b[at:at] = bytes(size)
        self.put64(16, self.u("<Q", 16) + size)
        self.put64(ROOT_OBJECTS_END, at + size)
        return at


def truncate_sealed(data, length):
    """data cut to `length` bytes (>= 1024 + 8) with the header's payload
    length, the root block's objects' end and the checksum made to fit:
    everything the header promises holds, but objects past the cut are gone."""
    b = bytearray(data[:length])
    P = length - HEADER - 8
    struct.pack_into("<Q", b, 16, P)
    struct.pack_into("<Q", b, ROOT_OBJECTS_END, HEADER + P)
    struct.pack_into("<Q", b, HEADER + P, image_checksum(b[:HEADER + P]))
    return bytes(b)


def reseal(data):
    """data with only its checksum recomputed (over [0, len - 8))."""
    b = bytearray(data)
    struct.pack_into("<Q", b, len(b) - 8, image_checksum(b[:-8]))
    return bytes(b)
