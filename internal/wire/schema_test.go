package wire_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/dtsched/dts/internal/wire"
)

// The worker protocol's JSON Schemas (docs/protocol/*.schema.json) are the
// spec that SDKs in other languages are written from. These tests keep
// them and the Go types the coordinator and the Go worker marshal in step:
// the same field names, JSON types and required fields; every value the Go
// code sends validates; values the coordinator refuses do not.

const schemaDir = "../../docs/protocol"

// schemaFiles maps each message type to its schema file and, for a type
// that appears only inside another message, its definition there.
var schemaFiles = []struct {
	typ  reflect.Type
	file string
	def  string // "" for the schema's root
}{
	{reflect.TypeFor[wire.Delivery](), "delivery.schema.json", ""},
	{reflect.TypeFor[wire.Control](), "control.schema.json", ""},
	{reflect.TypeFor[wire.Result](), "result.schema.json", ""},
	{reflect.TypeFor[wire.Heartbeat](), "heartbeat.schema.json", ""},
	{reflect.TypeFor[wire.InFlight](), "heartbeat.schema.json", "in_flight"},
	{reflect.TypeFor[wire.QueueWeight](), "heartbeat.schema.json", "queue_weight"},
	{reflect.TypeFor[wire.Logs](), "result.schema.json", "logs"},
	{reflect.TypeFor[wire.LogLine](), "result.schema.json", "log_line"},
}

// neverNull are the slices without omitempty that the Go code never sends
// as null (so their schemas allow only arrays): the Go worker builds
// job_types with make.
var neverNull = map[string]bool{"Heartbeat.job_types": true}

// readSchema returns a schema file decoded as plain JSON.
func readSchema(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(schemaDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return m
}

// jsonField is one field of a Go struct as encoding/json writes it.
type jsonField struct {
	name      string
	omitempty bool
	typ       reflect.Type
}

func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty"), typ: f.Type})
	}
	return out
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// jsonType is the JSON Schema type of what encoding/json writes for t: ""
// for any JSON value (json.RawMessage).
func jsonType(t reflect.Type) string {
	switch {
	case t == rawType:
		return ""
	case t == timeType:
		return "string"
	case t.Kind() == reflect.Pointer:
		return jsonType(t.Elem())
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Float32, reflect.Float64:
		return "number"
	}
	return "unsupported " + t.Kind().String()
}

// schemaTypes returns a property's "type" as a sorted list (nil: absent).
func schemaTypes(prop map[string]any) []string {
	switch v := prop["type"].(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			s, _ := x.(string)
			out = append(out, s)
		}
		slices.Sort(out)
		return out
	}
	return nil
}

func stringList(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	slices.Sort(out)
	return out
}

// TestSchemasMatchGoTypes: for each message type, the schema's properties
// are exactly the struct's JSON fields, each with the JSON type
// encoding/json writes for it (a time as a date-time string; a slice
// without omitempty may be null; json.RawMessage as any value, so no
// type), its required list is exactly the fields without omitempty (what
// the Go code always sends), it allows no other property, and a slice of
// structs refers to its element type's definition.
func TestSchemasMatchGoTypes(t *testing.T) {
	defOf := map[reflect.Type]string{}
	for _, s := range schemaFiles {
		if s.def != "" {
			defOf[s.typ] = "#/$defs/" + s.def
		}
	}
	for _, s := range schemaFiles {
		t.Run(s.typ.Name(), func(t *testing.T) {
			sch := readSchema(t, s.file)
			if s.def != "" {
				defs, _ := sch["$defs"].(map[string]any)
				sch, _ = defs[s.def].(map[string]any)
				if sch == nil {
					t.Fatalf("%s has no $defs/%s", s.file, s.def)
				}
			}
			if got := schemaTypes(sch); !slices.Equal(got, []string{"object"}) {
				t.Errorf("type %v; want object", got)
			}
			if sch["additionalProperties"] != false {
				t.Error(`additionalProperties is not false: the schema must list everything a sender may send`)
			}
			props, _ := sch["properties"].(map[string]any)
			fields := jsonFields(s.typ)
			var names, required []string
			for _, f := range fields {
				names = append(names, f.name)
				if !f.omitempty {
					required = append(required, f.name)
				}
				prop, ok := props[f.name].(map[string]any)
				if !ok {
					t.Errorf("field %s is not in the schema", f.name)
					continue
				}
				want := jsonType(f.typ)
				var wantTypes []string
				if want != "" {
					wantTypes = []string{want}
				}
				if want == "array" && !f.omitempty && !neverNull[s.typ.Name()+"."+f.name] {
					wantTypes = []string{"array", "null"} // a nil slice is written as null
				}
				if got := schemaTypes(prop); !slices.Equal(got, wantTypes) {
					t.Errorf("%s: schema type %v; Go writes %v", f.name, got, wantTypes)
				}
				if f.typ == timeType && prop["format"] != "date-time" {
					t.Errorf("%s: a time; want format date-time, have %v", f.name, prop["format"])
				}
				if f.typ.Kind() == reflect.Pointer && f.typ.Elem().Kind() == reflect.Struct {
					if ref := defOf[f.typ.Elem()]; prop["$ref"] != ref {
						t.Errorf("%s: $ref %v; want %q", f.name, prop["$ref"], ref)
					}
				}
				if f.typ.Kind() == reflect.Slice && f.typ.Elem().Kind() == reflect.Struct && f.typ.Elem() != timeType {
					items, _ := prop["items"].(map[string]any)
					if ref := defOf[f.typ.Elem()]; items == nil || items["$ref"] != ref {
						t.Errorf("%s: items %v; want {\"$ref\": %q}", f.name, items, ref)
					}
				}
			}
			var schemaNames []string
			for name := range props {
				schemaNames = append(schemaNames, name)
			}
			slices.Sort(names)
			slices.Sort(schemaNames)
			if !slices.Equal(names, schemaNames) {
				t.Errorf("properties %v; the Go type's JSON fields are %v", schemaNames, names)
			}
			slices.Sort(required)
			var schemaRequired []string
			if r, ok := sch["required"]; ok {
				schemaRequired = stringList(r)
			}
			if !slices.Equal(required, schemaRequired) {
				t.Errorf("required %v; the fields Go always writes are %v", schemaRequired, required)
			}
		})
	}
}

// TestSchemaBoundsMatchGoConstants: the bounds the schemas state are the
// ones the Go code enforces.
func TestSchemaBoundsMatchGoConstants(t *testing.T) {
	prop := func(file string, path ...string) map[string]any {
		m := readSchema(t, file)
		for _, p := range path {
			m, _ = m[p].(map[string]any)
		}
		if m == nil {
			t.Fatalf("%s: no %s", file, strings.Join(path, "/"))
		}
		return m
	}
	for _, c := range []struct {
		what string
		got  any
		want int
	}{
		{"result progress maximum", prop("result.schema.json", "properties", "progress")["maximum"], wire.MaxProgress},
		{"result message maxLength", prop("result.schema.json", "properties", "message")["maxLength"], wire.MaxProgressMessage},
		{"heartbeat codec maximum", prop("heartbeat.schema.json", "properties", "codec")["maximum"], wire.CodecTrace},
		{"log line level maxLength", prop("result.schema.json", "$defs", "log_line", "properties", "level")["maxLength"], wire.MaxLogLevelLen},
		{"heartbeat protocol minimum", prop("heartbeat.schema.json", "properties", "protocol")["minimum"], wire.MinProtocolVersion},
		{"heartbeat queues maxItems", prop("heartbeat.schema.json", "properties", "queues")["maxItems"], wire.MaxWorkerQueues},
		{"queue weight maximum", prop("heartbeat.schema.json", "$defs", "queue_weight", "properties", "weight")["maximum"], wire.MaxQueueWeight},
	} {
		if got, ok := c.got.(float64); !ok || int(got) != c.want {
			t.Errorf("%s = %v; the Go code's is %d", c.what, c.got, c.want)
		}
	}
	if got := prop("control.schema.json", "properties", "op")["enum"]; !reflect.DeepEqual(got, []any{wire.OpCancel}) {
		t.Errorf("control op enum %v; want [%s]", got, wire.OpCancel)
	}
	outcomes := []any{wire.OutcomeCompleted, wire.OutcomeFailed, wire.OutcomeReleased, wire.OutcomeProgress}
	if got := prop("result.schema.json", "properties", "outcome")["enum"]; !reflect.DeepEqual(got, outcomes) {
		t.Errorf("result outcome enum %v; want %v", got, outcomes)
	}
	re := prop("heartbeat.schema.json", "$defs", "queue_weight", "properties", "name")["pattern"].(string)
	for _, name := range []string{"default", "a.b:c-d_9", strings.Repeat("q", wire.MaxQueueNameLen), "", "a b", "é", strings.Repeat("q", wire.MaxQueueNameLen+1)} {
		if got := regexp.MustCompile(re).MatchString(name); got != wire.ValidQueueName(name) {
			t.Errorf("queue name %q: the schema's pattern says %v, wire.ValidQueueName %v", name, got, !got)
		}
	}
}

// compile compiles every schema, with formats asserted (date-time).
func compile(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	out := map[string]*jsonschema.Schema{}
	for _, file := range []string{"delivery.schema.json", "control.schema.json", "result.schema.json", "heartbeat.schema.json"} {
		b, err := os.ReadFile(filepath.Join(schemaDir, file))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		id, _ := doc.(map[string]any)["$id"].(string)
		if err := c.AddResource(id, doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		s, err := c.Compile(id)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out[strings.TrimSuffix(file, ".schema.json")] = s
	}
	return out
}

func validate(s *jsonschema.Schema, b []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// TestGoMessagesValidate: full and minimal values of every message, as
// encoding/json writes them, pass their schemas.
func TestGoMessagesValidate(t *testing.T) {
	schemas := compile(t)
	now := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)
	const bigToken = 1<<63 - 1 // beyond a double's exact range
	cases := []struct {
		name, schema string
		v            any
	}{
		{"full delivery", "delivery", wire.Delivery{JobID: 42, Name: "email.send", Queue: "critical", Payload: json.RawMessage(`{"to":"a@example.com"}`),
			Attempt: 2, MaxRetries: 3, TimeoutSeconds: 30, LeaseToken: bigToken, CreatedAt: now}},
		{"minimal delivery", "delivery", wire.Delivery{JobID: 1, Name: "x", Attempt: 1, LeaseToken: 1, CreatedAt: now}},
		{"cancel", "control", wire.Control{Op: wire.OpCancel, JobID: 42, LeaseToken: bigToken, Reason: "canceled"}},
		{"cancel of the newest lease", "control", wire.Control{Op: wire.OpCancel, JobID: 42}},
		{"completed", "result", wire.Result{JobID: 42, LeaseToken: bigToken, WorkerID: "w-1", Attempt: 1, Outcome: wire.OutcomeCompleted,
			Result: json.RawMessage(`{"ok":true}`), StartedAt: now, FinishedAt: now.Add(time.Second)}},
		{"completed without a result", "result", wire.Result{JobID: 42, LeaseToken: 7, WorkerID: "w", Attempt: 1, Outcome: wire.OutcomeCompleted}},
		{"failed", "result", wire.Result{JobID: 42, LeaseToken: 7, WorkerID: "w", Attempt: 3, Outcome: wire.OutcomeFailed,
			Error: "timed out after 30s", Reason: "timeout", StartedAt: now, FinishedAt: now}},
		{"released", "result", wire.Result{JobID: 42, LeaseToken: 7, WorkerID: "w", Attempt: 1, Outcome: wire.OutcomeReleased,
			Error: "worker shut down", Reason: "shutdown", StartedAt: now, FinishedAt: now}},
		{"progress", "result", wire.Result{JobID: 42, LeaseToken: 7, WorkerID: "w", Attempt: 1, Outcome: wire.OutcomeProgress,
			Progress: 100, Message: strings.Repeat("é", wire.MaxProgressMessage), StartedAt: now}},
		{"completed with logs", "result", wire.Result{JobID: 42, LeaseToken: 7, WorkerID: "w", Attempt: 1, Outcome: wire.OutcomeCompleted,
			StartedAt: now, FinishedAt: now, Logs: &wire.Logs{Dropped: 2, Lines: []wire.LogLine{{Time: now, Level: "INFO", Message: "sent n=1"}}}}},
		{"progress with empty logs", "result", wire.Result{JobID: 42, LeaseToken: 7, WorkerID: "w", Attempt: 1, Outcome: wire.OutcomeProgress,
			StartedAt: now, Logs: &wire.Logs{}}},
		{"full heartbeat", "heartbeat", wire.Heartbeat{WorkerID: "host-1234", JobTypes: []string{"email.send", "*"},
			Queues: []wire.QueueWeight{{Name: "critical", Weight: 6}, {Name: "low", Weight: 0}}, Concurrency: 8, Prefetch: 32,
			InFlight: []wire.InFlight{{JobID: 42, LeaseToken: bigToken, Started: true, RunMillis: 1500}, {JobID: 43, LeaseToken: 9, Waiting: true}, {JobID: 44, LeaseToken: 10}},
			Draining: true, Stopped: true, Credential: "dtsw_secret", Codec: wire.CodecBatch, Protocol: wire.ProtocolVersion,
			SentAt: now, Host: "host", Version: "v1.2.3"}},
		{"minimal heartbeat", "heartbeat", wire.Heartbeat{WorkerID: "w", JobTypes: []string{}, Concurrency: 1, SentAt: now}},
	}
	for _, c := range cases {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(schemas[c.schema], b); err != nil {
			t.Errorf("%s: %s\n%v", c.name, b, err)
		}
	}
}

// TestSchemasRefuseBadMessages: messages of the wrong type, without a
// required field, with a field the protocol does not have, or outside the
// bounds the coordinator enforces fail their schemas.
func TestSchemasRefuseBadMessages(t *testing.T) {
	schemas := compile(t)
	const ts = `"2026-05-01T12:00:00Z"`
	cases := []struct {
		name, schema, json string
	}{
		{"delivery: job_id a string", "delivery", `{"job_id":"42","name":"x","payload":null,"attempt":1,"max_retries":0,"lease_token":7,"created_at":` + ts + `}`},
		{"delivery: no lease_token", "delivery", `{"job_id":42,"name":"x","payload":null,"attempt":1,"max_retries":0,"created_at":` + ts + `}`},
		{"delivery: lease_token 0", "delivery", `{"job_id":42,"name":"x","payload":null,"attempt":1,"max_retries":0,"lease_token":0,"created_at":` + ts + `}`},
		{"delivery: lease_token beyond int64", "delivery", `{"job_id":42,"name":"x","payload":null,"attempt":1,"max_retries":0,"lease_token":9223372036854775808,"created_at":` + ts + `}`},
		{"delivery: no payload", "delivery", `{"job_id":42,"name":"x","attempt":1,"max_retries":0,"lease_token":7,"created_at":` + ts + `}`},
		{"delivery: created_at not a time", "delivery", `{"job_id":42,"name":"x","payload":null,"attempt":1,"max_retries":0,"lease_token":7,"created_at":"yesterday"}`},
		{"control: unknown op", "control", `{"op":"pause","job_id":42,"lease_token":7}`},
		{"control: no job_id", "control", `{"op":"cancel","lease_token":7}`},
		{"result: unknown outcome", "result", `{"job_id":42,"lease_token":7,"worker_id":"w","attempt":1,"outcome":"done","started_at":` + ts + `,"finished_at":` + ts + `}`},
		{"result: no worker_id", "result", `{"job_id":42,"lease_token":7,"attempt":1,"outcome":"completed","started_at":` + ts + `,"finished_at":` + ts + `}`},
		{"result: worker_id with a control character", "result", `{"job_id":42,"lease_token":7,"worker_id":"w\u0000","attempt":1,"outcome":"completed","started_at":` + ts + `,"finished_at":` + ts + `}`},
		{"result: progress 101", "result", `{"job_id":42,"lease_token":7,"worker_id":"w","attempt":1,"outcome":"progress","progress":101,"started_at":` + ts + `,"finished_at":` + ts + `}`},
		{"result: attempt a float", "result", `{"job_id":42,"lease_token":7,"worker_id":"w","attempt":1.5,"outcome":"completed","started_at":` + ts + `,"finished_at":` + ts + `}`},
		{"result: an unknown field", "result", `{"job_id":42,"lease_token":7,"worker_id":"w","attempt":1,"outcome":"completed","retry":true,"started_at":` + ts + `,"finished_at":` + ts + `}`},
		{"result: a log line without a level", "result", `{"job_id":42,"lease_token":7,"worker_id":"w","attempt":1,"outcome":"completed","started_at":` + ts + `,"finished_at":` + ts + `,"logs":{"lines":[{"time":` + ts + `,"message":"x"}]}}`},
		{"result: logs dropped -1", "result", `{"job_id":42,"lease_token":7,"worker_id":"w","attempt":1,"outcome":"completed","started_at":` + ts + `,"finished_at":` + ts + `,"logs":{"lines":[],"dropped":-1}}`},
		{"heartbeat: concurrency 0", "heartbeat", `{"worker_id":"w","job_types":["*"],"concurrency":0,"in_flight":[],"sent_at":` + ts + `}`},
		{"heartbeat: no in_flight", "heartbeat", `{"worker_id":"w","job_types":["*"],"concurrency":1,"sent_at":` + ts + `}`},
		{"heartbeat: job_types a string", "heartbeat", `{"worker_id":"w","job_types":"*","concurrency":1,"in_flight":[],"sent_at":` + ts + `}`},
		{"heartbeat: in_flight without a token", "heartbeat", `{"worker_id":"w","job_types":["*"],"concurrency":1,"in_flight":[{"job_id":1}],"sent_at":` + ts + `}`},
		{"heartbeat: run_ms a string", "heartbeat", `{"worker_id":"w","job_types":["*"],"concurrency":1,"in_flight":[{"job_id":1,"lease_token":2,"started":true,"run_ms":"5"}],"sent_at":` + ts + `}`},
		{"heartbeat: queue weight 1001", "heartbeat", `{"worker_id":"w","job_types":["*"],"queues":[{"name":"q","weight":1001}],"concurrency":1,"in_flight":[],"sent_at":` + ts + `}`},
		{"heartbeat: protocol 0", "heartbeat", `{"worker_id":"w","job_types":["*"],"concurrency":1,"in_flight":[],"protocol":0,"sent_at":` + ts + `}`},
		{"heartbeat: empty worker_id", "heartbeat", `{"worker_id":"","job_types":["*"],"concurrency":1,"in_flight":[],"sent_at":` + ts + `}`},
	}
	for _, c := range cases {
		if err := validate(schemas[c.schema], []byte(c.json)); err == nil {
			t.Errorf("%s: the %s schema accepts %s", c.name, c.schema, c.json)
		}
	}
}

// exampleBlock is a JSON example in docs/protocol.md: a ```json block
// right after a line "<!-- example: SCHEMA -->".
var exampleBlock = regexp.MustCompile("(?s)<!-- example: ([a-z]+) -->\\s*```json\\n(.*?)```")

// TestProtocolDocExamplesValidate: every example message in
// docs/protocol.md passes its schema.
func TestProtocolDocExamplesValidate(t *testing.T) {
	schemas := compile(t)
	doc, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, m := range exampleBlock.FindAllSubmatch(doc, -1) {
		name := string(m[1])
		s, ok := schemas[name]
		if !ok {
			t.Errorf("an example of %q, which has no schema", name)
			continue
		}
		seen[name]++
		if err := validate(s, m[2]); err != nil {
			t.Errorf("example %s #%d: %s\n%v", name, seen[name], m[2], err)
		}
	}
	for name := range schemas {
		if seen[name] == 0 {
			t.Errorf("docs/protocol.md has no example of a %s", name)
		}
	}
}
