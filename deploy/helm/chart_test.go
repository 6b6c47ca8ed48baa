package helm_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "dts"
	release   = "prod"
	namespace = "jobs"
	// After SHUTDOWN_GRACE a worker gives handlers that ignore cancellation
	// 5 s more, then hands back their jobs, flushes results and sends its
	// stopped heartbeat (docs/operations.md, Shutdown): the pod's grace
	// period must cover all of it, or the kubelet kills it mid-drain.
	drainAfterGrace = 10 * time.Second
)

// The binaries' sources, relative to this package, for the settings they
// read and the routes they serve.
var binaries = map[string]struct{ cmd, routes string }{
	"submitter":   {"../../submitter/cmd/submitter", "../../submitter/submitter.go"},
	"coordinator": {"../../coordinator/cmd/coordinator", "../../coordinator/coordinator.go"},
	"worker":      {"../../worker/cmd/worker", "../../worker/http.go"},
}

// runtimeSettings are read by Go's runtime in every binary (GOGC also by
// envconf.SetGOGC), not by the binaries' flag code.
var runtimeSettings = []string{"GOGC", "GOMEMLIMIT", "GOMAXPROCS"}

// object is one rendered manifest, decoded into its Go type.
type object struct {
	source string // template file
	kind   string // apiVersion/kind
	name   string
	value  any
}

type rendered struct {
	objs []object
}

func (r rendered) all(kind string) []object {
	var out []object
	for _, o := range r.objs {
		if o.kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func (r rendered) get(t *testing.T, kind, name string) any {
	t.Helper()
	for _, o := range r.objs {
		if o.kind == kind && o.name == name {
			return o.value
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

// newObject returns a pointer to the Go type of each kind the chart may
// render; any other kind fails the test.
var newObject = map[string]func() any{
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                     func() any { return &appsv1.StatefulSet{} },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
	"keda.sh/v1alpha1/ScaledObject":           func() any { return &scaledObject{} },
	"keda.sh/v1alpha1/TriggerAuthentication":  func() any { return &triggerAuthentication{} },
}

// render renders the chart with values (YAML over the chart's defaults) as
// `helm install prod -n jobs` would, and decodes every object strictly:
// unknown fields, duplicate keys and wrong types fail.
func render(t *testing.T, values string) (rendered, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	rv, err := chartutil.ToRenderValues(chrt, vals,
		chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true},
		chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatalf("render values: %v", err)
	}
	files, err := engine.Render(chrt, rv)
	if err != nil {
		return rendered{}, err
	}
	var r rendered
	for _, file := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(file, ".yaml") {
			continue // NOTES.txt, _helpers.tpl
		}
		docs := releaseutil.SplitManifests(files[file])
		for _, key := range slices.Sorted(maps.Keys(docs)) {
			doc := docs[key]
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v\n%s", file, err, doc)
			}
			kind := tm.APIVersion + "/" + tm.Kind
			mk, ok := newObject[kind]
			if !ok {
				t.Fatalf("%s: unexpected kind %s", file, kind)
			}
			v := mk()
			if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
				t.Fatalf("%s: %s does not decode strictly: %v\n%s", file, kind, err, doc)
			}
			name := reflect.ValueOf(v).Elem().FieldByName("ObjectMeta").Interface().(metav1.ObjectMeta).Name
			r.objs = append(r.objs, object{file, kind, name, v})
		}
	}
	return r, nil
}

// TestMain silences the loader's notes on the chart's two symbolic links
// (files/ points at deploy/prometheus and deploy/grafana, on purpose).
func TestMain(m *testing.M) {
	log.SetOutput(io.Discard)
	os.Exit(m.Run())
}

func mustRender(t *testing.T, values string) rendered {
	t.Helper()
	r, err := render(t, values)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	checkInvariants(t, r)
	return r
}

// settings are the environment variables each binary reads: the first
// argument of every envconf.Env getter, os.Getenv and os.LookupEnv call in
// its cmd package, found in the source, so a setting renamed there fails
// here.
var settings = sync.OnceValues(func() (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	getters := map[string]bool{"String": true, "Int": true, "Float": true, "Bool": true, "Duration": true, "Getenv": true, "LookupEnv": true}
	envName := regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	for bin, src := range binaries {
		fset := token.NewFileSet()
		entries, err := os.ReadDir(src.cmd)
		if err != nil {
			return nil, err
		}
		names := map[string]bool{}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(src.cmd, e.Name()), nil, 0)
			if err != nil {
				return nil, err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || !getters[sel.Sel.Name] {
					return true
				}
				lit, ok := call.Args[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				if s, err := strconv.Unquote(lit.Value); err == nil && envName.MatchString(s) {
					names[s] = true
				}
				return true
			})
		}
		for _, s := range runtimeSettings {
			names[s] = true
		}
		out[bin] = names
	}
	return out, nil
})

// routes are the GET paths each binary serves, from its route table.
var routes = sync.OnceValues(func() (map[string]map[string]bool, error) {
	route := regexp.MustCompile(`\.(?:Get|Handle|HandleFunc|Method)\((?:[A-Za-z.]+,\s*)?"(?:GET )?(/[^"]*)"`)
	out := map[string]map[string]bool{}
	for bin, src := range binaries {
		b, err := os.ReadFile(src.routes)
		if err != nil {
			return nil, err
		}
		out[bin] = map[string]bool{}
		for _, m := range route.FindAllSubmatch(b, -1) {
			out[bin][string(m[1])] = true
		}
	}
	return out, nil
})

func TestSourcesOfTruth(t *testing.T) {
	t.Parallel()
	s, err := settings()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := routes()
	if err != nil {
		t.Fatal(err)
	}
	// The parsers must find what the binaries are known to read and serve,
	// and nothing that is not a setting.
	for bin, want := range map[string][]string{
		"submitter":   {"SUBMITTER_ADDR", "DATABASE_URL", "AUTH_JWT_SECRET", "REDIS_SENTINEL_PASSWORD", "LOG_LEVEL", "MAX_BACKLOG"},
		"coordinator": {"COORDINATOR_ADDR", "COORDINATOR_ID", "HEARTBEAT_INTERVAL", "REQUIRE_WORKER_CREDENTIALS", "AUTH_JWT_SECRET"},
		"worker":      {"WORKER_ADDR", "WORKER_ID", "SHUTDOWN_GRACE", "WORKER_CREDENTIAL", "WORKER_QUEUES", "SMTP_PASSWORD"},
	} {
		for _, name := range want {
			if !s[bin][name] {
				t.Errorf("%s: setting %s not found in %s", bin, name, binaries[bin].cmd)
			}
		}
		if s[bin]["NOT_A_SETTING"] {
			t.Errorf("%s: NOT_A_SETTING counted as a setting", bin)
		}
	}
	if s["worker"]["DATABASE_URL"] {
		t.Error("worker: DATABASE_URL counted as a setting; the worker never reads it")
	}
	for bin, want := range map[string][]string{
		"submitter":   {"/healthz", "/readyz", "/metrics"},
		"coordinator": {"/healthz", "/readyz", "/metrics"},
		"worker":      {"/healthz", "/metrics"},
	} {
		for _, p := range want {
			if !rt[bin][p] {
				t.Errorf("%s: route %s not found in %s (found %v)", bin, p, binaries[bin].routes, slices.Sorted(maps.Keys(rt[bin])))
			}
		}
	}
	if rt["worker"]["/readyz"] {
		t.Error("worker: /readyz found; the worker serves none")
	}
}

// podOf returns the pod template and replicas of a Deployment or StatefulSet.
func podOf(o object) (corev1.PodTemplateSpec, *metav1.LabelSelector, *int32, bool) {
	switch v := o.value.(type) {
	case *appsv1.Deployment:
		return v.Spec.Template, v.Spec.Selector, v.Spec.Replicas, true
	case *appsv1.StatefulSet:
		return v.Spec.Template, v.Spec.Selector, v.Spec.Replicas, true
	}
	return corev1.PodTemplateSpec{}, nil, nil, false
}

func envMap(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

// checkInvariants checks what must hold whatever the values.
func checkInvariants(t *testing.T, r rendered) {
	t.Helper()
	s, err := settings()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := routes()
	if err != nil {
		t.Fatal(err)
	}
	secretKeys := map[string]map[string]bool{}
	for _, o := range r.all("v1/Secret") {
		sec := o.value.(*corev1.Secret)
		secretKeys[sec.Name] = map[string]bool{}
		for k := range sec.Data {
			secretKeys[sec.Name][k] = true
		}
	}
	// A reference to a Secret the chart renders must name one of its keys;
	// one to another Secret is the user's (an existingSecret value).
	checkSecretRef := func(where, name, key string) {
		t.Helper()
		if keys, ok := secretKeys[name]; ok && !keys[key] {
			t.Errorf("%s: Secret %s has no key %s", where, name, key)
		}
		if name == "" || key == "" {
			t.Errorf("%s: Secret reference without name or key", where)
		}
	}
	names := map[string]bool{}
	for _, o := range r.objs {
		id := o.kind + " " + o.name
		if names[id] {
			t.Errorf("%s rendered twice", id)
		}
		names[id] = true
		meta := reflect.ValueOf(o.value).Elem().FieldByName("ObjectMeta").Interface().(metav1.ObjectMeta)
		if meta.Labels["app.kubernetes.io/instance"] != release || meta.Labels["app.kubernetes.io/name"] != "dts" {
			t.Errorf("%s: labels %v lack the release's", id, meta.Labels)
		}
	}

	heartbeat := map[string]string{}
	type podInfo struct {
		workload string
		labels   map[string]string
		ports    map[string]int32
	}
	var pods []podInfo
	for _, o := range r.objs {
		tpl, sel, replicas, ok := podOf(o)
		if !ok {
			continue
		}
		id := o.kind + " " + o.name
		selector, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || selector.Empty() || !selector.Matches(labels.Set(tpl.Labels)) {
			t.Errorf("%s: selector %v does not select its pods %v (%v)", id, sel, tpl.Labels, err)
		}
		if len(tpl.Spec.Containers) != 1 {
			t.Fatalf("%s: %d containers, want 1", id, len(tpl.Spec.Containers))
		}
		c := tpl.Spec.Containers[0]
		bin := c.Name
		if _, ok := binaries[bin]; !ok {
			t.Fatalf("%s: container %q is none of the binaries", id, bin)
		}
		if tpl.Labels["app.kubernetes.io/component"] != bin {
			t.Errorf("%s: component label %q, container %s", id, tpl.Labels["app.kubernetes.io/component"], bin)
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		pods = append(pods, podInfo{id, tpl.Labels, ports})

		// Every variable is a setting of the binary, set once.
		seen := map[string]bool{}
		for _, e := range c.Env {
			if seen[e.Name] {
				t.Errorf("%s: env %s set twice", id, e.Name)
			}
			seen[e.Name] = true
			if !s[bin][e.Name] {
				t.Errorf("%s: env %s is not a setting of the %s binary", id, e.Name, bin)
			}
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				checkSecretRef(id+" env "+e.Name, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
			}
		}
		env := envMap(c)

		// The probes ask for routes the binary serves, on the port it listens on.
		addrVar := map[string]string{"submitter": "SUBMITTER_ADDR", "coordinator": "COORDINATOR_ADDR", "worker": "WORKER_ADDR"}[bin]
		_, port, err := net.SplitHostPort(env[addrVar].Value)
		if err != nil {
			t.Errorf("%s: %s=%q: %v", id, addrVar, env[addrVar].Value, err)
		}
		for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil {
				t.Errorf("%s: no HTTP %s probe", id, name)
				continue
			}
			if !rt[bin][p.HTTPGet.Path] {
				t.Errorf("%s: %s probe on %s, which the %s does not serve (%v)", id, name, p.HTTPGet.Path, bin, slices.Sorted(maps.Keys(rt[bin])))
			}
			cp, ok := ports[p.HTTPGet.Port.String()]
			if !ok {
				t.Errorf("%s: %s probe on port %s, not a container port (%v)", id, name, p.HTTPGet.Port.String(), ports)
			}
			if strconv.Itoa(int(cp)) != port {
				t.Errorf("%s: %s probe on container port %d, the %s listens on %s", id, name, cp, bin, port)
			}
		}
		if bin != "worker" && (c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz") {
			t.Errorf("%s: readiness probe is not /readyz", id)
		}

		if v, ok := env["HEARTBEAT_INTERVAL"]; ok {
			heartbeat[id] = v.Value
		}

		switch bin {
		case "worker":
			if _, ok := env["DATABASE_URL"]; ok {
				t.Errorf("%s: a worker gets DATABASE_URL", id)
			}
			grace, err := time.ParseDuration(env["SHUTDOWN_GRACE"].Value)
			if err != nil {
				t.Errorf("%s: SHUTDOWN_GRACE %q: %v", id, env["SHUTDOWN_GRACE"].Value, err)
			}
			if tg := tpl.Spec.TerminationGracePeriodSeconds; tg == nil {
				t.Errorf("%s: no terminationGracePeriodSeconds", id)
			} else if time.Duration(*tg)*time.Second < grace+drainAfterGrace {
				t.Errorf("%s: terminationGracePeriodSeconds %d does not cover SHUTDOWN_GRACE %v + %v", id, *tg, grace, drainAfterGrace)
			}
			if env["WORKER_ID"].ValueFrom == nil || env["WORKER_ID"].ValueFrom.FieldRef == nil ||
				env["WORKER_ID"].ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("%s: WORKER_ID is not the pod's name", id)
			}
			if o.kind == "apps/v1/StatefulSet" {
				// Credentials: the container reads its own from a mounted file.
				cmd := strings.Join(c.Command, " ")
				if !strings.Contains(cmd, "WORKER_CREDENTIAL=") || !s[bin]["WORKER_CREDENTIAL"] {
					t.Errorf("%s: StatefulSet worker without WORKER_CREDENTIAL in %q", id, cmd)
				}
			}
		case "coordinator":
			if replicas == nil || *replicas < 2 {
				t.Errorf("%s: %v replicas, want a leader and a standby", id, replicas)
			}
		}
	}
	if vals := slices.Compact(slices.Sorted(maps.Values(heartbeat))); len(vals) != 1 {
		t.Errorf("HEARTBEAT_INTERVAL differs between coordinators and workers: %v", heartbeat)
	}

	// Services select pods that have the port they forward to.
	for _, o := range r.all("v1/Service") {
		svc := o.value.(*corev1.Service)
		matched := 0
		for _, p := range pods {
			if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.labels)) {
				matched++
				for _, sp := range svc.Spec.Ports {
					if _, ok := p.ports[sp.TargetPort.String()]; !ok {
						t.Errorf("Service %s: targetPort %s is not a port of %s", svc.Name, sp.TargetPort.String(), p.workload)
					}
				}
			}
		}
		if matched == 0 {
			t.Errorf("Service %s selects no pods", svc.Name)
		}
	}

	// Autoscalers and budgets name what exists.
	for _, o := range r.all("autoscaling/v2/HorizontalPodAutoscaler") {
		hpa := o.value.(*autoscalingv2.HorizontalPodAutoscaler)
		ref := hpa.Spec.ScaleTargetRef
		_, _, replicas, _ := podOf(object{value: r.get(t, ref.APIVersion+"/"+ref.Kind, ref.Name)})
		if replicas != nil {
			t.Errorf("HPA %s: its target %s sets replicas, which each upgrade would reset", hpa.Name, ref.Name)
		}
	}
	for _, o := range r.all("policy/v1/PodDisruptionBudget") {
		pdb := o.value.(*policyv1.PodDisruptionBudget)
		sel, _ := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		for _, p := range pods {
			if sel.Matches(labels.Set(p.labels)) && p.labels["app.kubernetes.io/component"] != "coordinator" {
				t.Errorf("PDB %s selects %s", pdb.Name, p.workload)
			}
		}
	}
	auths := map[string]*triggerAuthentication{}
	for _, o := range r.all("keda.sh/v1alpha1/TriggerAuthentication") {
		ta := o.value.(*triggerAuthentication)
		auths[ta.Name] = ta
		for _, ref := range ta.Spec.SecretTargetRef {
			checkSecretRef("TriggerAuthentication "+ta.Name, ref.Name, ref.Key)
		}
	}
	for _, o := range r.all("keda.sh/v1alpha1/ScaledObject") {
		so := o.value.(*scaledObject)
		ref := so.Spec.ScaleTargetRef
		_, _, replicas, _ := podOf(object{value: r.get(t, ref.APIVersion+"/"+ref.Kind, ref.Name)})
		if replicas != nil {
			t.Errorf("ScaledObject %s: its target %s sets replicas, which each upgrade would reset", so.Name, ref.Name)
		}
		if len(so.Spec.Triggers) == 0 {
			t.Errorf("ScaledObject %s: no trigger", so.Name)
		}
		for _, tr := range so.Spec.Triggers {
			if tr.Type != "postgresql" || tr.Metadata["query"] == "" || tr.Metadata["targetQueryValue"] == "" {
				t.Errorf("ScaledObject %s: trigger %+v", so.Name, tr)
			}
			if tr.AuthenticationRef == nil || auths[tr.AuthenticationRef.Name] == nil {
				t.Errorf("ScaledObject %s: authenticationRef %v names no TriggerAuthentication", so.Name, tr.AuthenticationRef)
			} else if ta := auths[tr.AuthenticationRef.Name]; len(ta.Spec.SecretTargetRef) != 1 || ta.Spec.SecretTargetRef[0].Parameter != "connection" {
				t.Errorf("TriggerAuthentication %s: want the connection from a Secret, got %+v", ta.Name, ta.Spec.SecretTargetRef)
			}
		}
	}

	// The ServiceMonitor finds the Services by their labels and port, and
	// labels their jobs as the alerts and the dashboard expect.
	for _, o := range r.all("monitoring.coreos.com/v1/ServiceMonitor") {
		sm := o.value.(*monitoringv1.ServiceMonitor)
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		jobs := map[string]bool{}
		for _, so := range r.all("v1/Service") {
			svc := so.value.(*corev1.Service)
			if !sel.Matches(labels.Set(svc.Labels)) {
				continue
			}
			jobs[svc.Labels[sm.Spec.JobLabel]] = true
			for _, ep := range sm.Spec.Endpoints {
				if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
					t.Errorf("ServiceMonitor %s: Service %s has no port %s", sm.Name, svc.Name, ep.Port)
				}
				if ep.Path != "/metrics" {
					t.Errorf("ServiceMonitor %s: path %s", sm.Name, ep.Path)
				}
			}
		}
		if want := map[string]bool{"submitter": true, "coordinator": true, "worker": true}; !reflect.DeepEqual(jobs, want) {
			t.Errorf("ServiceMonitor %s: jobs %v, want %v", sm.Name, jobs, want)
		}
	}

	// The rules are alerts.yml's, unchanged.
	for _, o := range r.all("monitoring.coreos.com/v1/PrometheusRule") {
		pr := o.value.(*monitoringv1.PrometheusRule)
		b, err := os.ReadFile("../prometheus/alerts.yml")
		if err != nil {
			t.Fatal(err)
		}
		var want monitoringv1.PrometheusRuleSpec
		if err := yaml.UnmarshalStrict(b, &want); err != nil {
			t.Fatalf("alerts.yml does not decode strictly as a PrometheusRule spec: %v", err)
		}
		if len(want.Groups) == 0 || !reflect.DeepEqual(pr.Spec, want) {
			t.Errorf("PrometheusRule %s differs from deploy/prometheus/alerts.yml", pr.Name)
		}
	}

	// The dashboard is dts.json, byte for byte.
	for _, o := range r.all("v1/ConfigMap") {
		cm := o.value.(*corev1.ConfigMap)
		if !strings.HasSuffix(cm.Name, "-dashboard") {
			continue
		}
		b, err := os.ReadFile("../grafana/dashboards/dts.json")
		if err != nil {
			t.Fatal(err)
		}
		if got := cm.Data["dts.json"]; got != string(b) {
			t.Errorf("ConfigMap %s: dts.json differs from deploy/grafana/dashboards/dts.json (%d bytes, want %d)", cm.Name, len(got), len(b))
		}
	}
}

func containerOf(t *testing.T, r rendered, kind, name string) corev1.Container {
	t.Helper()
	tpl, _, _, _ := podOf(object{value: r.get(t, kind, name)})
	return tpl.Spec.Containers[0]
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	r := mustRender(t, "")
	kinds := map[string]int{}
	for _, o := range r.objs {
		kinds[o.kind]++
	}
	want := map[string]int{
		"v1/Secret": 1, "v1/ConfigMap": 1, "v1/Service": 3,
		"apps/v1/Deployment": 3, "autoscaling/v2/HorizontalPodAutoscaler": 1, "policy/v1/PodDisruptionBudget": 1,
		"keda.sh/v1alpha1/ScaledObject": 1, "keda.sh/v1alpha1/TriggerAuthentication": 1,
	}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("rendered %v, want %v", kinds, want)
	}
	so := r.get(t, "keda.sh/v1alpha1/ScaledObject", "prod-dts-worker-default").(*scaledObject)
	if *so.Spec.MinReplicaCount != 1 || *so.Spec.MaxReplicaCount != 10 || so.Spec.Triggers[0].Metadata["targetQueryValue"] != "8" {
		t.Errorf("ScaledObject spec %+v", so.Spec)
	}
	// Every kind's work, due jobs counted up to maxReplicas x jobsPerReplica.
	if q := so.Spec.Triggers[0].Metadata["query"]; !strings.Contains(q, "LIMIT 80)") || strings.Contains(q, "ANY(") {
		t.Errorf("query %q", q)
	}
	pdb := r.get(t, "policy/v1/PodDisruptionBudget", "prod-dts-coordinator").(*policyv1.PodDisruptionBudget)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PDB minAvailable %v", pdb.Spec.MinAvailable)
	}
	env := envMap(containerOf(t, r, "apps/v1/Deployment", "prod-dts-submitter"))
	if env["AUTH_API_KEYS"].Value != "true" || env["INSECURE_NO_AUTH"].Name != "" {
		t.Errorf("submitter auth env %v", env)
	}
	if env := envMap(containerOf(t, r, "apps/v1/Deployment", "prod-dts-worker-default")); env["NETWORK_TASK_URL"].Value != "http://prod-dts-submitter:8000/healthz" {
		t.Errorf("worker NETWORK_TASK_URL %q", env["NETWORK_TASK_URL"].Value)
	}
}

func TestMonitoring(t *testing.T) {
	t.Parallel()
	r := mustRender(t, "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}\n")
	if len(r.all("monitoring.coreos.com/v1/ServiceMonitor")) != 1 || len(r.all("monitoring.coreos.com/v1/PrometheusRule")) != 1 {
		t.Fatal("want one ServiceMonitor and one PrometheusRule")
	}
	pr := r.get(t, "monitoring.coreos.com/v1/PrometheusRule", "prod-dts").(*monitoringv1.PrometheusRule)
	if n := len(pr.Spec.Groups[0].Rules); n < 5 {
		t.Errorf("%d rules", n)
	}
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	r := mustRender(t, `
redis:
  url: redis://:data-secret@redis/0
  sentinel:
    enabled: true
    addrs: [sentinel-0.sentinel:26379, sentinel-1.sentinel:26379, sentinel-2.sentinel:26379]
    master: dts
    password: sentinel-secret
`)
	sec := r.get(t, "v1/Secret", "prod-dts").(*corev1.Secret)
	if string(sec.Data["redis-sentinel-password"]) != "sentinel-secret" {
		t.Errorf("Secret data %v", sec.Data)
	}
	for _, name := range []string{"prod-dts-submitter", "prod-dts-coordinator", "prod-dts-worker-default"} {
		env := envMap(containerOf(t, r, "apps/v1/Deployment", name))
		if env["REDIS_SENTINEL_ADDRS"].Value != "sentinel-0.sentinel:26379,sentinel-1.sentinel:26379,sentinel-2.sentinel:26379" ||
			env["REDIS_SENTINEL_MASTER"].Value != "dts" ||
			env["REDIS_SENTINEL_PASSWORD"].ValueFrom.SecretKeyRef.Key != "redis-sentinel-password" {
			t.Errorf("%s: sentinel env %v", name, env)
		}
	}
	if _, err := render(t, "redis: {sentinel: {enabled: true, addrs: [sentinel-0], master: dts}}"); err == nil || !strings.Contains(err.Error(), "host:port") {
		t.Errorf("a sentinel address without port: %v, want refused", err)
	}
}

func TestScaleToZeroAndKinds(t *testing.T) {
	t.Parallel()
	r := mustRender(t, `
workers:
  kinds:
    default: null
    email:
      jobTypes: [email]
      concurrency: 32
      shutdownGraceSeconds: 120
      autoscaling: {minReplicas: 0, maxReplicas: 4}
      env: {SMTP_HOST: smtp.example.com, SMTP_FROM: noreply@example.com}
    critical:
      queues: [{name: critical, weight: 6}, {name: default, weight: 3}, {name: "tenant:a"}]
      autoscaling: {minReplicas: 2, maxReplicas: 20, jobsPerReplica: 4}
      env: {WORKER_PREFETCH: 0}
    fixed:
      replicas: 3
      autoscaling: {enabled: false}
      terminationGracePeriodSeconds: 90
submitter:
  env: {MAX_BACKLOG: 100000}
`)
	if n := len(r.all("apps/v1/Deployment")); n != 5 {
		t.Errorf("%d Deployments, want submitter, coordinator and 3 kinds", n)
	}
	email := r.get(t, "keda.sh/v1alpha1/ScaledObject", "prod-dts-worker-email").(*scaledObject)
	if *email.Spec.MinReplicaCount != 0 || email.Spec.Triggers[0].Metadata["activationTargetQueryValue"] != "0" {
		t.Errorf("email: want scale to zero, got %+v", email.Spec)
	}
	if q := email.Spec.Triggers[0].Metadata["query"]; !strings.Contains(q, "name = ANY('{email}')") || !strings.Contains(q, "LIMIT 128)") {
		t.Errorf("email query %q", q)
	}
	tpl, _, _, _ := podOf(object{value: r.get(t, "apps/v1/Deployment", "prod-dts-worker-email")})
	if *tpl.Spec.TerminationGracePeriodSeconds != 135 || envMap(tpl.Spec.Containers[0])["SHUTDOWN_GRACE"].Value != "120s" {
		t.Errorf("email: grace %d, env %v", *tpl.Spec.TerminationGracePeriodSeconds, tpl.Spec.Containers[0].Env)
	}
	critical := r.get(t, "keda.sh/v1alpha1/ScaledObject", "prod-dts-worker-critical").(*scaledObject)
	if q := critical.Spec.Triggers[0].Metadata["query"]; !strings.Contains(q, "queue = ANY('{critical,default,tenant:a}')") ||
		strings.Contains(q, "name = ANY") || critical.Spec.Triggers[0].Metadata["targetQueryValue"] != "4" {
		t.Errorf("critical trigger %+v", critical.Spec.Triggers[0])
	}
	if env := envMap(containerOf(t, r, "apps/v1/Deployment", "prod-dts-worker-critical")); env["WORKER_QUEUES"].Value != "critical:6,default:3,tenant:a:1" {
		t.Errorf("WORKER_QUEUES %q", env["WORKER_QUEUES"].Value)
	}
	fixed := r.get(t, "apps/v1/Deployment", "prod-dts-worker-fixed").(*appsv1.Deployment)
	if fixed.Spec.Replicas == nil || *fixed.Spec.Replicas != 3 || *fixed.Spec.Template.Spec.TerminationGracePeriodSeconds != 90 {
		t.Errorf("fixed: %v replicas", fixed.Spec.Replicas)
	}
	if len(r.all("keda.sh/v1alpha1/ScaledObject")) != 2 {
		t.Error("want ScaledObjects for email and critical only")
	}
}

func TestAuthSecrets(t *testing.T) {
	t.Parallel()
	r := mustRender(t, `
postgresql: {existingSecret: pg, existingSecretKey: url}
redis: {existingSecret: redis, existingSecretKey: url}
auth:
  apiKeys: false
  existingSecret: jwt
  existingSecretKey: secret
  jwtPublicKey: |
    -----BEGIN PUBLIC KEY-----
    MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=
    -----END PUBLIC KEY-----
  jwtIssuer: https://issuer.example
  requireWorkerCredentials: true
workers:
  kinds:
    default:
      credentials: {existingSecret: worker-credentials}
`)
	if len(r.all("v1/Secret")) != 0 {
		t.Error("the chart made a Secret although every secret is the user's")
	}
	for _, kind := range []string{"apps/v1/Deployment"} {
		for _, name := range []string{"prod-dts-submitter", "prod-dts-coordinator"} {
			c := containerOf(t, r, kind, name)
			env := envMap(c)
			if ref := env["AUTH_JWT_SECRET"].ValueFrom.SecretKeyRef; ref.Name != "jwt" || ref.Key != "secret" {
				t.Errorf("%s: AUTH_JWT_SECRET from %v", name, ref)
			}
			if ref := env["DATABASE_URL"].ValueFrom.SecretKeyRef; ref.Name != "pg" || ref.Key != "url" {
				t.Errorf("%s: DATABASE_URL from %v", name, ref)
			}
			if env["AUTH_JWT_PUBLIC_KEY_FILE"].Value != "/etc/dts/jwt/public.pem" || len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/etc/dts/jwt" {
				t.Errorf("%s: public key %v, mounts %v", name, env["AUTH_JWT_PUBLIC_KEY_FILE"], c.VolumeMounts)
			}
			if _, ok := env["AUTH_API_KEYS"]; ok {
				t.Errorf("%s: AUTH_API_KEYS set", name)
			}
		}
	}
	if env := envMap(containerOf(t, r, "apps/v1/Deployment", "prod-dts-coordinator")); env["REQUIRE_WORKER_CREDENTIALS"].Value != "true" {
		t.Errorf("REQUIRE_WORKER_CREDENTIALS %q", env["REQUIRE_WORKER_CREDENTIALS"].Value)
	}
	sts := r.get(t, "apps/v1/StatefulSet", "prod-dts-worker-default").(*appsv1.StatefulSet)
	if sts.Spec.Template.Spec.Volumes[1].Secret.SecretName != "worker-credentials" {
		t.Errorf("credential volume %+v", sts.Spec.Template.Spec.Volumes)
	}
	so := r.get(t, "keda.sh/v1alpha1/ScaledObject", "prod-dts-worker-default").(*scaledObject)
	if so.Spec.ScaleTargetRef.Kind != "StatefulSet" {
		t.Errorf("ScaledObject targets %+v", so.Spec.ScaleTargetRef)
	}
	ta := r.get(t, "keda.sh/v1alpha1/TriggerAuthentication", "prod-dts-postgresql").(*triggerAuthentication)
	if ref := ta.Spec.SecretTargetRef[0]; ref.Name != "pg" || ref.Key != "url" {
		t.Errorf("TriggerAuthentication %+v", ref)
	}

	// Inline secrets go to the chart's Secret.
	r = mustRender(t, "auth: {jwtSecret: 0123456789abcdef0123456789abcdef}")
	sec := r.get(t, "v1/Secret", "prod-dts").(*corev1.Secret)
	if string(sec.Data["auth-jwt-secret"]) != "0123456789abcdef0123456789abcdef" || len(sec.Data) != 3 {
		t.Errorf("Secret keys %v", slices.Sorted(maps.Keys(sec.Data)))
	}
}

// TestRefused: values that would give pods that refuse to start, workers
// the coordinators refuse, or workers killed mid-drain fail to render.
func TestRefused(t *testing.T) {
	t.Parallel()
	for values, want := range map[string]string{
		"auth: {apiKeys: false}":                                                       "auth.insecureNoAuth",
		"auth: {requireWorkerCredentials: true}":                                       "credentials.existingSecret",
		"workers: {kinds: {default: {terminationGracePeriodSeconds: 35}}}":             "below shutdownGraceSeconds + 10",
		"workers: {kinds: {default: {env: {SHUTDOWN_GRACE: 10m}}}}":                    "set by the chart",
		"submitter: {env: {DATABASE_URL: postgres://x}}":                               "set by the chart",
		"workers: {kinds: {Big_Kind: {}}}":                                             "lower-case",
		"workers: {kinds: {default: {queues: [{name: \"a'b\"}]}}}":                     "queue name",
		"workers: {kinds: {default: {autoscaling: {minReplicas: 3, maxReplicas: 2}}}}": "minReplicas <= maxReplicas",
		"postgresql: {url: \"\"}":                                                      "postgresql.url",
	} {
		_, err := render(t, values)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: render error %v, want one saying %q", values, err, want)
		}
	}
	// Without tokens the chart runs only when told it is insecure on purpose.
	r := mustRender(t, "auth: {apiKeys: false, insecureNoAuth: true}")
	if env := envMap(containerOf(t, r, "apps/v1/Deployment", "prod-dts-submitter")); env["INSECURE_NO_AUTH"].Value != "true" {
		t.Errorf("INSECURE_NO_AUTH %q", env["INSECURE_NO_AUTH"].Value)
	}
}

// TestLint runs `helm lint` on the chart: with its defaults and with every
// optional part on.
func TestLint(t *testing.T) {
	t.Parallel()
	kube, err := chartutil.ParseKubeVersion("v1.31.0")
	if err != nil {
		t.Fatal(err)
	}
	for _, values := range []map[string]any{
		{},
		{"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}},
	} {
		res := lint.AllWithKubeVersion(chartDir, values, namespace, kube)
		var out bytes.Buffer
		for _, m := range res.Messages {
			fmt.Fprintln(&out, m)
		}
		if res.HighestSeverity >= support.WarningSev {
			t.Errorf("helm lint %v:\n%s", values, out.String())
		} else if out.Len() > 0 {
			t.Logf("helm lint %v:\n%s", values, out.String())
		}
	}
}
