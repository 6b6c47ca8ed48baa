package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/dtsched/dts/internal/job"
)

// This file holds the insert of jobs with parents. A job whose parents are
// not all done is inserted 'waiting', with one job_dependencies row per
// parent; it is in no claim index, so the claim never sees it. From then
// on the trigger jobs_release_dependents (functions.sql) moves it on in the
// transaction of the statement that makes its last parent final, whatever
// that statement is (a result, a reclaim, a release, a cancel).
//
// What must stay true: a parent's final transition either commits before
// the edge is inserted (then dts_settle_waiting, run here, sees the final
// state) or after it (then the parent has has_dependents and the trigger
// sees the edge). jobInsertDeps locks the parents and sets has_dependents
// before it inserts the edges, so a concurrent transition waits for its
// commit, and one that committed first is read after the lock.

// jobInsertDeps inserts params[idx] (jobInsertKeyed's rules for keys), their
// edges, and settles the new waiting jobs whose parents are already done.
// A job outside idx whose result is already in out (an earlier job a
// unique claim answered) is a parent like one named by id: it is locked
// first. resolve runs once the jobs are inserted, before the edges: it
// returns more jobs of the call to insert (a repeat of a unique key taking
// the place of a first job that was not created), which are inserted in
// turn, or, when there are none, fills out for the jobs that answer as
// another of the call (repeats of a unique key).
func jobInsertDeps(ctx context.Context, tx pgx.Tx, params []JobInsertParams, idx []int, out []JobInsertResult, resolve func([]JobInsertResult) []int) error {
	inserted := make([]bool, len(params))
	external, err := jobInsertDepsLock(ctx, tx, params, idx, out, inserted)
	if err != nil {
		return err
	}
	for next := idx; ; {
		if len(next) > 0 {
			if err := jobInsertKeyed(ctx, tx, params, next, out); err != nil {
				return err
			}
		}
		if next = resolve(out); len(next) == 0 {
			break
		}
		// Rare (a repeat of a unique key whose first job was not
		// created): its parents are locked after the others'.
		more, err := jobInsertDepsLock(ctx, tx, params, next, out, inserted)
		if err != nil {
			return err
		}
		external = append(external, more...)
		idx = append(slices.Clone(idx), next...)
	}
	// Edges of the jobs created here; an earlier job returned for its key
	// keeps the edges it was created with.
	var children, parents, waiting []int64
	marked := slices.Clone(external)
	for _, k := range idx {
		p, r := params[k], out[k]
		if !r.Created || !p.hasParents() {
			continue
		}
		waiting = append(waiting, r.ID)
		add := func(parent int64) {
			children, parents = append(children, r.ID), append(parents, parent)
		}
		for _, id := range p.DependsOn {
			add(id)
		}
		for _, i := range p.DependsOnIndex {
			add(out[i].ID)
			marked = append(marked, out[i].ID)
		}
		if p.Callback {
			for j := range k {
				add(out[j].ID)
				marked = append(marked, out[j].ID)
			}
		}
	}
	slices.Sort(marked)
	marked = slices.Compact(marked)
	if _, err := tx.Exec(ctx, q("JobInsertDepsMark"), marked); err != nil {
		return fmt.Errorf("mark parents: %w", err)
	}
	if _, err := tx.Exec(ctx, q("JobInsertDepsEdges"), parents, children); err != nil {
		return fmt.Errorf("insert dependencies: %w", err)
	}
	if _, err := tx.Exec(ctx, q("JobInsertDepsSettle"), waiting); err != nil {
		return fmt.Errorf("settle waiting jobs: %w", err)
	}
	rows, err := tx.Query(ctx, q("JobInsertDepsStates"), waiting)
	if err != nil {
		return fmt.Errorf("read states: %w", err)
	}
	states := map[int64]job.State{}
	for rows.Next() {
		var id int64
		var st string
		if err := rows.Scan(&id, &st); err != nil {
			rows.Close()
			return fmt.Errorf("read states: %w", err)
		}
		states[id] = job.State(st)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read states: %w", err)
	}
	for _, k := range idx {
		if st, ok := states[out[k].ID]; ok && out[k].Created {
			out[k].State = st
		}
	}
	return nil
}

// jobInsertDepsLock locks the existing parents of params[idx], marks idx
// in inserted, and returns those parents' ids, ascending. A job of the
// call not inserted here (not in inserted) whose result is already in out
// is an existing parent too. A parent that does not exist gives an
// *UnknownJobsError.
func jobInsertDepsLock(ctx context.Context, tx pgx.Tx, params []JobInsertParams, idx []int, out []JobInsertResult, inserted []bool) ([]int64, error) {
	for _, k := range idx {
		inserted[k] = true
	}
	var external []int64
	earlier := func(j int) {
		if !inserted[j] && out[j].ID != 0 {
			external = append(external, out[j].ID)
		}
	}
	for _, k := range idx {
		p := params[k]
		external = append(external, p.DependsOn...)
		for _, j := range p.DependsOnIndex {
			earlier(j)
		}
		if p.Callback {
			for j := range k {
				earlier(j)
			}
		}
	}
	slices.Sort(external)
	external = slices.Compact(external)
	if len(external) == 0 {
		return nil, nil
	}
	// Locked in id order: two submissions naming the same parents never
	// wait on each other in a cycle.
	rows, err := tx.Query(ctx, q("JobInsertDepsLock"), external)
	if err != nil {
		return nil, fmt.Errorf("lock parents: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("lock parents: %w", err)
	}
	if len(found) != len(external) {
		var missing []int64
		for _, id := range external {
			if _, ok := slices.BinarySearch(found, id); !ok {
				missing = append(missing, id)
			}
		}
		return nil, &UnknownJobsError{IDs: missing}
	}
	return external, nil
}
