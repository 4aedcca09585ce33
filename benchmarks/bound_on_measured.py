"""The bound-trained Gibbs posterior on a folder ``boundcalc measure`` already finished (model,
prior, S, a stats file with the per-group σ search), e.g. ``examples/text_classifier.py``'s:

    python benchmarks/bound_on_measured.py --model OUT/model --prior OUT/prior --S OUT/S.jsonl \
        --test OUT/heldout.jsonl --stats OUT/stats.json --max-length 32 --batch 64 --draws 8 \
        --save OUT/stats_bound.json --name text_classifier

trains it with :class:`BoundTraining`'s defaults (``add_bound_posterior``; ``--sigma``,
``--init``, ``--means``, ``--epochs``, ``--lr`` change them), prints the learned row beside the
per-group one and the yardstick, the prior's test-set bound on S (``test_set_kl`` of the prior's
errors on S, which it never saw; shown, not claimed), and with ``--name`` writes them to
``benchmarks/results/bound_posterior_cpu.json``. ``--mc-seed`` seeds the certificate's Monte
Carlo draws: settings compared in development runs use another seed than the run quoted.
"""
import sys, time, json, argparse
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import torch
from pathlib import Path
from boundcalc.stats import load_stats
from boundcalc.measure.data.hf import load_task_model
from boundcalc.measure.data.dataset_io import read_batches
from boundcalc.measure.data.bound_posterior import BoundTraining, add_bound_posterior
from boundcalc.measure.threads import blas_threads, data_threads
from boundcalc.certify.bound_posterior import _held_out
import boundcalc as bc
ap = argparse.ArgumentParser()
ap.add_argument('--model'); ap.add_argument('--prior'); ap.add_argument('--S'); ap.add_argument('--test')
ap.add_argument('--stats'); ap.add_argument('--max-length', type=int, default=64); ap.add_argument('--batch', type=int, default=32)
ap.add_argument('--lr', type=float, default=1e-3); ap.add_argument('--epochs', type=int, default=1); ap.add_argument('--draws', type=int, default=6)
ap.add_argument('--save'); ap.add_argument('--objective', default='quad'); ap.add_argument('--name')
ap.add_argument('--sigma', default='groups'); ap.add_argument('--init', default='model')
ap.add_argument('--lr-sigma', type=float, default=0.05); ap.add_argument('--means', default='all')
ap.add_argument('--mc-seed', type=int, default=40000)
a = ap.parse_args()
dev = torch.device('cpu')
stats = load_stats(a.stats)
tm = load_task_model(a.model, dev); prior = load_task_model(a.prior, dev)
S = read_batches(a.S, tm, max_length=a.max_length, batch_size=a.batch)
T = read_batches(a.test, tm, max_length=a.max_length, batch_size=a.batch)
spec = BoundTraining(epochs=a.epochs, lr_mu=a.lr, objective=a.objective, sigma=a.sigma,
                    init=a.init, lr_sigma=a.lr_sigma, means=a.means)
t = time.time()
with blas_threads(data_threads(tm.model, dev)):
    l = add_bound_posterior(stats, tm, prior, S, dev, spec, draws=a.draws, seed=a.mc_seed)
    ho = _held_out(tm, T, dev, l, 50000)
    from boundcalc.measure.data.data_pass import run_pass
    from boundcalc.certify.claims import Count, test_set_bound
    errs = run_pass(prior, S, dev, alpha=0.0, norms=False).err01
    yard = test_set_bound(Count(int(round(float(errs.sum()))), S.n))
print('yardstick: the prior\'s test-set bound on S', yard.value, 'at δ', yard.delta,
      f'({int(round(float(errs.sum())))} errors on {S.n} rows)', flush=True)
stats.provenance['gibbs_learned']['held_out'] = ho
for e in ('pac_bayes_kl_gaussian_learned_mc', 'pac_bayes_kl_gaussian_groups_mc'):
    r = bc.compute(e, stats=stats)
    print(e, r.value, r.delta)
rec = stats.provenance['gibbs_learned']; c = stats.curves['gibbs_risk_learned']; g = stats.curves['gibbs_risk_groups']
print('E learned', c.value[0], 'E groups', g.value[0], 'N', c.n_samples, 'scale', rec['scale'], 'KL', min(x['KL'] for x in rec['scale_search']),
      'train_s', round(l.seconds,1), 'scale_learned', rec.get('scale_learned'), 'hist', l.history, 'heldout', ho, 'total_s', round(time.time()-t,1), flush=True)
if a.save: stats.save(a.save)
if a.name:
    path = Path(__file__).resolve().parent / 'results' / 'bound_posterior_cpu.json'
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc[a.name] = {'command': ' '.join(sys.argv), 'rows': {e: bc.compute(e, stats=stats).value for e in (
        'pac_bayes_kl_gaussian_learned_mc', 'pac_bayes_kl_gaussian_groups_mc')},
        'E_learned': float(c.value[0]), 'E_groups': float(g.value[0]), 'N': c.n_samples,
        'KL_learned': min(x['KL'] for x in rec['scale_search']), 'training_s': round(l.seconds, 1),
        'held_out': ho, 'total_s': round(time.time() - t, 1),
        'baseline_prior_test_set_bound_on_S': yard.value, 'baseline_delta': yard.delta,
        'training': stats.provenance['gibbs_learned']['training'],
        'scale': rec['scale'], 'scale_learned': rec.get('scale_learned'),
        'load': [round(x, 2) for x in __import__('os').getloadavg()]}
    path.write_text(json.dumps(doc, indent=1))
