#!/usr/bin/env python3
"""Exact optimum of the unlimited-capacity prefix-cache hit ratio of a workload, as an ILP.

Used to check whether a hit-ratio target is reachable at all (BENCHMARKS.md). Each context's
blocks may be permuted freely; with unlimited capacity, hit blocks = total blocks - nodes of the
prefix trie of the reordered contexts. Only prefixes whose block SET is contained in two or more
distinct contexts can ever be shared, so the model has a variable per (context, shareable
ordered prefix) and per shared trie node; every other prefix is a private node costing 1.
Identical contexts (as sets) are modelled once: they can always share everything.

Needs numpy and scipy (HiGHS through scipy.optimize.milp); it is an analysis tool, not part of
ctxr or its tests. Tractable for short contexts (k = 3, 5 at N = 2,000 solve in seconds to a
minute); for k = 15 the number of shareable ordered prefixes explodes.

Usage: python3 scripts/optimal-hit-ratio.py WORKLOAD.jsonl OUT.jsonl [time_limit_s]
Prints the LP bound and the ILP optimum; writes the optimal reordering to OUT.jsonl (check it
with `ctxr simulate --input OUT.jsonl`).
"""
import json, itertools, sys, time
from collections import Counter, defaultdict
import numpy as np, scipy.sparse as sp
from scipy.optimize import milp, LinearConstraint, Bounds
inp=sys.argv[1]; outp=sys.argv[2]; tl=float(sys.argv[3]) if len(sys.argv)>3 else 900
L=[json.loads(l) for l in open(inp)]
total=sum(len(x) for x in L)
sets=sorted(set(tuple(sorted(x)) for x in L))
k=max(len(s) for s in sets); assert all(len(s)==k for s in sets)
cnt=Counter(sub for s in sets for l in range(1,k) for sub in itertools.combinations(s,l))
V={}
def var(key):
    if key not in V: V[key]=len(V)
    return V[key]
rows=[];cols=[];vals=[];lo=[];hi=[];r=0
def add(coefs,l,h):
    global r
    for v,c in coefs: rows.append(r);cols.append(v);vals.append(c)
    lo.append(l);hi.append(h);r+=1
const=len(sets)+len(sets)*(k-1)  # level k nodes + private cost baseline
objc=defaultdict(float)
for ci,s in enumerate(sets):
    # enumerate shared ordered prefixes by DFS
    def dfs(p):
        ext=[b for b in s if b not in p and cnt[tuple(sorted(p+(b,)))]>=2] if len(p)<k-1 else []
        kids=[p+(b,) for b in ext]
        if p:
            xp=var(('x',ci,p))
            objc[xp]-=1                 # saves the private node at this level
            n=var(('n',p)); objc[n]+=0  # ensure present
            add([(n,1),(xp,-1)],0,np.inf)
            if kids: add([(var(('x',ci,q)),1) for q in kids]+[(xp,-1)],-np.inf,0)
        else:
            if kids: add([(var(('x',ci,q)),1) for q in kids],-np.inf,1)
        for q in kids: dfs(q)
    dfs(())
n=len(V); c=np.zeros(n); integ=np.zeros(n)
for key,i in V.items():
    if key[0]=='n': c[i]=1
    else: integ[i]=1
for i,v in objc.items(): c[i]+=v
A=sp.csr_matrix((vals,(rows,cols)),shape=(r,n)); cons=LinearConstraint(A,lo,hi)
print(f'{inp}: k={k} distinct={len(sets)} vars={n} rows={r} total_blocks={total}',flush=True)
t=time.time(); lp=milp(c,constraints=cons,bounds=Bounds(0,1),integrality=np.zeros(n)); tlp=time.time()-t
nodes_lp=lp.fun+const
print(f'LP: nodes>={nodes_lp:.3f} -> hit ratio <= {(total-nodes_lp)/total:.5f}  ({tlp:.1f}s)',flush=True)
t=time.time()
res=milp(c,constraints=cons,bounds=Bounds(0,1),integrality=integ,options=dict(time_limit=tl,mip_rel_gap=0,disp=False))
tm=time.time()-t
print('MIP status',res.status,res.message,flush=True)
if res.x is not None:
    best=res.fun+const; bnd=res.mip_dual_bound+const
    print(f'MIP: best nodes={best:.1f} hit={(total-best)/total:.5f}; bound nodes>={bnd:.3f} hit<={(total-bnd)/total:.5f}; gap={res.mip_gap}; ({tm:.1f}s)',flush=True)
    deep={}
    for key,i in V.items():
        if key[0]=='x' and res.x[i]>0.5:
            ci,p=key[1],key[2]
            if ci not in deep or len(p)>len(deep[ci]): deep[ci]=p
    sidx={s:i for i,s in enumerate(sets)}
    with open(outp,'w') as o:
        for x in L:
            s=tuple(sorted(x)); p=list(deep.get(sidx[s],()))
            o.write(json.dumps(p+[b for b in s if b not in p])+'\n')
    print('wrote',outp)
