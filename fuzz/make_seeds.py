#!/usr/bin/env python3
"""fuzz/make_seeds.py — writes the seed corpora of the libFuzzer targets
(fuzz/corpus/<target>/): a few small, valid inputs of each format, from which
libFuzzer mutates.  Run from the repository root; the output is committed, so
this runs only when the formats change.  Needs nothing but Python."""
import json, os, struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, 'fuzz', 'corpus')


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def case_lines():
    lines = [
        'v1 seed=1 b=1 hq=1 hkv=1 nq=1 nk=2 d=1 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) scale=auto',
        'v1 seed=9 b=2 hq=8 hkv=2 nq=300 nk=700 d=96 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) scale=auto',
        'v1 seed=26 b=1 hq=1 hkv=1 nq=24 nk=31 d=16 dtype=f16 mask=window-br(inf,3) layout=bhsd dist=normal(0,1) scale=auto',
        'v1 seed=28 b=2 hq=2 hkv=1 nq=24 nk=40 d=16 dtype=f16 mask=dense(0.5) maskrows=0.25 layout=bhsd dist=normal(0,1) scale=auto',
        'v1 seed=7 b=3 hq=4 hkv=2 nq=64 nk=65 d=8 dtype=f32 mask=window-tl(2,5) seqlens-q=64,0,17 seqlens-k=1,65,30 layout=bshd dist=outliers(1,0.001) scale=-0.5',
        'v1 seed=18446744073709551615 b=1 hq=1 hkv=1 nq=4 nk=4 d=512 dtype=f16 dist=increasing(64) scale=1e-05',
        'v1 seed=3 b=1 hq=1 hkv=1 nq=2 nk=2 d=2 dtype=f32 dist=dominant(20) scale=2',
        'v1 seed=4 b=1 hq=1 hkv=1 nq=2 nk=2 d=2 dtype=bf16 dist=huge(0.9)',
        'v1 seed=5 b=1 hq=1 hkv=1 nq=2 nk=2 d=2 dtype=f16 dist=tiny() mask=none',
        'v1 seed=6 b=1 hq=1 hkv=1 nq=2 nk=2 d=2 dtype=f16 dist=uniform(-4,4) scale=0.125',
        'v1  nk=3 seed=2 d=4 hq=2 b=1 hkv=1 nq=3 dtype=f32 dist=equal()',
        'v1 seed=5 b=3 hq=8 hkv=2 nq=2 nk=300 d=64 dtype=bf16 mask=causal-br seqlens-k=300,1,77 layout=bshd dist=normal(0,1) scale=auto kv=paged(16,contig) splits=3',
        'v1 seed=3 b=2 hq=4 hkv=2 nq=100 nk=200 d=64 dtype=e4m3 out=f16 descale=block(64) p=e4m3 mask=causal-br seqlens-q=100,37 seqlens-k=200,80 layout=bshd dist=fa3(0.001,10) scale=auto',
        'v1 seed=12 b=2 hq=128 hkv=1 nq=2 nk=257 d=576 dtype=bf16 mask=causal-br seqlens-k=257,64 layout=bshd dist=normal(0,1) scale=auto dv=512 v=k kv=paged(64) splits=2',
    ]
    for i, line in enumerate(lines):
        put('case_line', '%02d.line' % i, line)
    return lines


def corpora(lines):
    put('corpus', 'fixture.cases', '# a comment\n\n' + '\n'.join('# why\n' + l for l in lines[:4]) + '\n')
    put('corpus', 'crlf.cases', '# windows line ends\r\n' + lines[0] + '\r\n   ' + lines[2] + '  \r\n')
    put('corpus', 'empty.cases', '')


def budgets():
    with open(os.path.join(ROOT, 'budgets.txt'), 'rb') as f:
        put('budgets', 'repository.txt', f.read())
    rows = []
    for t in ('f16', 'bf16', 'f32'):
        for o in ('O', 'LSE', 'dQ', 'dK', 'dV'):
            rows.append('%s %s scaled %s%s' % (t, o, '16' if t == 'f32' else '4', ' grows' if t == 'f32' else ''))
            rows.append('%s %s vs-naive-mean %s' % (t, o, 'off' if o == 'LSE' else '1.5'))
    put('budgets', 'minimal.txt', 'version 1\ngrowth-length 32.5\n' + '\n'.join(rows) + '\n')


def npy(descr, shape, data, major=1):
    shp = '(%s)' % (''.join('%d, ' % d for d in shape).rstrip(' ') if len(shape) != 1 else '%d,' % shape[0])
    head = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shp)
    pre = 10 if major == 1 else 12
    pad = (64 - (pre + len(head) + 1) % 64) % 64
    head = head + ' ' * pad + '\n'
    size = struct.pack('<H', len(head)) if major == 1 else struct.pack('<I', len(head))
    return b'\x93NUMPY' + bytes([major, 0]) + size + head.encode() + data


def npys():
    put('npy', 'f32_2x3.npy', npy('<f4', (2, 3), struct.pack('<6f', 1, -2, 3.5, 0, 1e-30, 7)))
    put('npy', 'f16_4.npy', npy('<f2', (4,), struct.pack('<4H', 0x3c00, 0xc000, 0x7bff, 1)))
    put('npy', 'u2_bf16_1x2x2x1.npy', npy('<u2', (1, 2, 2, 1), struct.pack('<4H', 0x3f80, 0xbf00, 0x4049, 0)))
    put('npy', 'bool_2x2.npy', npy('|b1', (2, 2), bytes([1, 0, 0, 1])))
    put('npy', 'i64_3_v2.npy', npy('<i8', (3,), struct.pack('<3q', 5, 0, 7), major=2))
    put('npy', 'f8_scalar_v3.npy', npy('<f8', (), struct.pack('<d', 3.25), major=3))


def safetensors(tensors, meta=None):
    header, blob = {}, b''
    if meta:
        header['__metadata__'] = meta
    for name, dtype, shape, data in tensors:
        header[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(header, separators=(',', ':')).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    return struct.pack('<Q', len(h)) + h + blob


def safetensor_files():
    put('safetensors', 'qkv.safetensors', safetensors([
        ('q', 'F32', [1, 1, 2, 2], struct.pack('<4f', 1, 2, 3, 4)),
        ('k', 'BF16', [1, 1, 1, 2], struct.pack('<2H', 0x3f80, 0xbf80)),
        ('lse', 'F32', [1, 1, 2], struct.pack('<2f', float('-inf'), 0.5)),
    ], meta={'format': 'pt'}))
    put('safetensors', 'mask.safetensors', safetensors([('mask', 'BOOL', [2, 2], bytes([1, 1, 0, 1])),
                                                         ('n', 'I64', [1], struct.pack('<q', 3))]))
    put('safetensors', 'empty.safetensors', safetensors([]))


if __name__ == '__main__':
    corpora(case_lines())
    budgets()
    npys()
    safetensor_files()
