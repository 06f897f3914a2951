package sim_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/sim"
	"github.com/lapsehq/lapse/sqlite"
)

// Defaults of a CI run; LAPSE_SIM_SEEDS and LAPSE_SIM_STEPS change them.
// Under the race detector the default is raceSeeds.
const (
	defaultSeeds   = 200
	raceSeeds      = 12
	defaultSteps   = 100
	postgresSeeds  = 8
	simParallelism = 2
)

// TestSimulate runs the simulator on SQLite: seeds 1…N (LAPSE_SIM_SEEDS,
// default 200, or 12 under -race), or the one LAPSE_SIM_SEED names, with its
// step log.
func TestSimulate(t *testing.T) {
	dir := t.TempDir()
	open := func(t *testing.T, seed uint64) (lapse.Store, error) {
		s, err := sqlite.Open(context.Background(), filepath.Join(dir, fmt.Sprintf("sim-%d.db", seed)), sqlite.Config{})
		if err != nil {
			return nil, err
		}
		return s, s.Migrate(context.Background())
	}
	seeds := defaultSeeds
	if raceEnabled {
		seeds = raceSeeds
	}
	simulate(t, "", envInt(t, "LAPSE_SIM_SEEDS", seeds), open)
}

// TestSimulatePostgres runs a few seeds on PostgreSQL when
// LAPSE_TEST_POSTGRES is set. A run there is not reproducible step for
// step: the same seed makes the same choices, but PostgreSQL's row locks
// and connection pool order the engine's concurrent calls differently.
func TestSimulatePostgres(t *testing.T) {
	testenv.Require(t, testenv.EnvPostgres, "PostgreSQL")
	open := func(t *testing.T, _ uint64) (lapse.Store, error) {
		s, err := postgres.Open(context.Background(), testenv.PostgresSchema(t), postgres.Config{})
		if err != nil {
			return nil, err
		}
		return s, s.Migrate(context.Background())
	}
	simulate(t, "Postgres", envInt(t, "LAPSE_SIM_PG_SEEDS", postgresSeeds), open)
}

// simulate runs seeds, simParallelism at a time, each on a store open
// makes (on the test's goroutine, which may skip or fail the test), and logs
// the summary.
func simulate(t *testing.T, suffix string, seeds int, open func(*testing.T, uint64) (lapse.Store, error)) {
	steps := envInt(t, "LAPSE_SIM_STEPS", defaultSteps)
	replay := func(seed uint64) string {
		return fmt.Sprintf("LAPSE_SIM_SEED=%d go test ./sim/ -run 'TestSimulate%s$' -v", seed, suffix)
	}
	list := make([]uint64, seeds)
	for i := range list {
		list[i] = uint64(i + 1)
	}
	var logf func(string, ...any)
	if s := os.Getenv("LAPSE_SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LAPSE_SIM_SEED=%q: %v", s, err)
		}
		list, logf = []uint64{seed}, t.Logf
	}
	begin := time.Now()
	var (
		mu     sync.Mutex
		total  = sim.Result{Faults: map[string]int{}, States: map[string]int{}}
		failed []uint64
	)
	type job struct {
		seed  uint64
		store lapse.Store
	}
	next := make(chan job)
	var wg sync.WaitGroup
	for range simParallelism {
		wg.Go(func() {
			for j := range next {
				seed := j.seed
				res, err := runSeed(j.store, seed, steps, logf)
				mu.Lock()
				if err != nil {
					failed = append(failed, seed)
					if v, ok := errors.AsType[*sim.Violation](err); ok {
						t.Errorf("%v\n\treplay: %s", v, replay(seed))
					} else {
						t.Errorf("seed %d: %v\n\treplay: %s", seed, err, replay(seed))
					}
				} else {
					total.Steps += res.Steps
					total.Checks += res.Checks
					total.Orders += res.Orders
					total.Operators += res.Operators
					total.OpLost += res.OpLost
					total.OpErrCommitted += res.OpErrCommitted
					for k, v := range res.Faults {
						total.Faults[k] += v
					}
					for k, v := range res.States {
						total.States[k] += v
					}
				}
				mu.Unlock()
			}
		})
	}
	for _, seed := range list {
		st, err := open(t, seed)
		if err != nil {
			t.Errorf("seed %d: open the store: %v", seed, err)
			break
		}
		next <- job{seed, st}
	}
	close(next)
	wg.Wait()
	var fs []string
	for _, k := range slices.Sorted(maps.Keys(total.Faults)) {
		fs = append(fs, fmt.Sprintf("%s=%d", k, total.Faults[k]))
	}
	var ss []string
	for _, k := range slices.Sorted(maps.Keys(total.States)) {
		ss = append(ss, fmt.Sprintf("%s=%d", k, total.States[k]))
	}
	t.Logf("sim%s: %d seeds (%d failed), %d steps, %d orders, %d operator actions (%d failed and committed, %d acknowledged without a row), %d invariant checks, faults: %s; %v",
		suffix, len(list), len(failed), total.Steps, total.Orders, total.Operators, total.OpErrCommitted, total.OpLost, total.Checks, strings.Join(fs, " "), time.Since(begin).Round(time.Millisecond))
	t.Logf("sim%s: orders at the end: %s", suffix, strings.Join(ss, " "))
}

func runSeed(st lapse.Store, seed uint64, steps int, logf func(string, ...any)) (*sim.Result, error) {
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return sim.Run(ctx, sim.Config{Seed: seed, Steps: steps, Store: st, Logf: logf})
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}
