package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// NodeOptions places a server started by StartNode.
type NodeOptions struct {
	// Netns is the file of the network namespace to run it in
	// (/var/run/netns/NAME, as netns.Host.File gives it); "" runs it in
	// this process's.
	Netns string
	// Host is the one address it listens on and is reached at; default
	// 127.0.0.1.
	Host string
	// Trust is a CIDR whose clients connect without a password, besides
	// loopback, e.g. the netns.Network's Subnet.
	Trust string
}

// StartNode starts a PostgreSQL server of the test's own with the empty
// database PairDatabase, for tests that place it, e.g. on a host of a
// netns.Network, and stops and removes it when the test ends. The
// services migrate the database themselves, as in production. It is
// durable as a Pair's node is (fsync aside).
func StartNode(t testing.TB, opt NodeOptions) *Node {
	t.Helper()
	n, err := startNode(t, opt)
	if err != nil {
		t.Fatalf("pgtest: start node: %v", err)
	}
	return n
}

func startNode(t testing.TB, opt NodeOptions) (*Node, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		if cred, err = postgresCredential(); err != nil {
			return nil, err
		}
	}
	n, err := newNode(t, "node", bin, cred)
	if err != nil {
		return nil, err
	}
	if opt.Host != "" {
		n.host = opt.Host
	}
	if opt.Netns != "" {
		n.netns = filepath.Base(opt.Netns)
	}
	if err := initCluster(n.bin, n.dir, n.data, n.cred); err != nil {
		return nil, fmt.Errorf("%s: %w", n.Name, err)
	}
	if opt.Trust != "" {
		hba, err := os.OpenFile(filepath.Join(n.data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		_, err = fmt.Fprintf(hba, "host all all %s trust\n", opt.Trust)
		hba.Close()
		if err != nil {
			return nil, err
		}
	}
	if err := n.start(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := n.exec(ctx, "CREATE DATABASE "+PairDatabase); err != nil {
		return nil, err
	}
	return n, nil
}
