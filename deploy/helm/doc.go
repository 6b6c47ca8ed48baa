// Package helm validates the Helm chart in dts/ without a cluster: its
// tests render the chart with Helm's Go SDK for several value sets, decode
// every object strictly into the Kubernetes, Prometheus Operator and
// (mirrored) KEDA types, check what must hold between the objects and the
// binaries they run, and run Helm's lint. The module is apart from the
// services' modules so that they never build Helm or Kubernetes.
package helm
