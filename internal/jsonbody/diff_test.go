package jsonbody

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// wide has a field of every kind that walk treats apart.
type wide struct {
	I     int               `json:"i"`
	U8    uint8             `json:"u8"`
	F32   float32           `json:"f32"`
	F     float64           `json:"f"`
	B     bool              `json:"b"`
	PB    *bool             `json:"pb"`
	Raw   []byte            `json:"raw"`
	Arr   [2]int            `json:"arr"`
	Ints  []int             `json:"ints"`
	PInts []*int            `json:"pints"`
	Any   any               `json:"any"`
	M     map[string][]item `json:"m"`
	Nest  *wide             `json:"nest"`
	T     time.Time         `json:"t"`
	PT    *time.Time        `json:"pt"`
	Kind  lapse.PaymentNoticeKind
	RM    json.RawMessage `json:"rm"`
	embedded
}

// diffTypes are the types the differential test decodes into.
var diffTypes = []reflect.Type{
	reflect.TypeFor[request](),
	reflect.TypeFor[notice](),
	reflect.TypeFor[orderCreate](),
	reflect.TypeFor[wide](),
	reflect.TypeFor[map[string]int](),
}

// diffSeeds are the bodies of the other tests, and bodies that walk reads
// differently from tokenWalker: escapes in keys, deep nesting, many keys,
// every form of number.
var diffSeeds = []string{
	`{"amount":1,"Amount":100}`,
	`{"AMOUNT":100}`,
	"{\"\u212aey\":1,\"order_no\":\"x\"}",
	`{"items":[{"sku":"a","qty":1},{"SKU":"b","qty":1}]}`,
	`{"colour":"red"}`,
	`{"untagged":"u"}`,
	`{"Ignored":"x"}`,
	`{"amount":1,"amount":100}`,
	`{"metadata":{"a":{"b":1,"b":2}}}`,
	`{"items":[{"sku":"a","qty":1},{"sku":"b","sku":"c","qty":1}]}`,
	"{\"order_no\":\"A\xff\xfe\"}",
	"{\"or\xffder\":\"A\"}",
	"{\"metadata\":{\"k\":[\"\xc3\"]}}",
	`{"coupon":"\ud800"}`,
	`{"coupon":"x\udc00y"}`,
	`{"coupon":"\ud83dx"}`,
	`{"metadata":{"a":"\ud83d\ud83d"}}`,
	`{"amount":1} x`,
	`{"amount":1}{"amount":2}`,
	`[1]`,
	``,
	`{"amount":1,}`,
	`{"amount":19.99}`,
	`{"amount":1e3}`,
	`{"amount":9223372036854775808}`,
	`{"small":128}`,
	`{"amount":"10"}`,
	`{"coupon":7}`,
	`{"items":{"sku":"a"}}`,
	`{"items":[[1]]}`,
	`{"items":[{"qty":true}]}`,
	`{"coupon":null}`,
	`{"items":[{"sku":"a","qty":null}]}`,
	`{"tags":{"a":"x"}}`,
	`{"at":"yesterday"}`,
	`{"order_no":"A","amount":1,"items":[{"sku":"a","qty":1}],"metadata":{"a":[1,"\ud83d\ude00"]}}`,
	`{"amount":5,"extra":{"deep":[1,2]},"coupon":null}`,
	`{"amount":5,"Amount":6}`,
	`{"Amount":6}`,
	`{"extra":1,"extra":2}`,
	"{\"extra\":\"\xff\"}",
	`{"amount":5} 1`,
	callbackBody,
	orderBody,
	`{"\u0061mount":1,"amount":2}`,
	`{"amount":1,"\u0061mount":2}`,
	`{"\u0061mount":1}`,
	`{"\u0041mount":1}`,
	`{"metadata":{"\ud83d\ude00":1,"😀":2}}`,
	`{"metadata":{"\ud83d\ude00":1,"\ud83d\ude01":2}}`,
	`{"\ud83d\ude00":1}`,
	`{"\ud800":1}`,
	`{"metadata":{"\udc00x":1}}`,
	`{"metadata":{"\ud800":1,"\ud801":2}}`,
	"{\"metadata\":{\"\xff\":1,\"\xfe\":2}}",
	"{\"metadata\":{\"a\\n\xff\":1}}",
	"{\"\xff\\u0041\":1}",
	`{"a\"b":1}`,
	`{"a\\":1}`,
	`{"\\u0061":1}`,
	`{"":1}`,
	`{"amount":1,"":2}`,
	`{"metadata":{"":1,"":2}}`,
	`{"items":[{"sku":"a"},{"":1}]}`,
	`{"amount":-0}`, `{"amount":0}`, `{"amount":-1}`, `{"amount":1E+2}`, `{"amount":1e-2}`, `{"amount":1.0}`,
	`{"amount":9223372036854775807}`, `{"amount":-9223372036854775808}`, `{"amount":-9223372036854775809}`,
	`{"small":-129}`, `{"small":127}`, `{"u8":-1}`, `{"u8":255}`, `{"u8":256}`,
	`{"f32":1e39}`, `{"f32":3.4e38}`, `{"f":1e309}`, `{"f":-1e-400}`, `{"f":1E+308}`, `{"f":0.0000001}`,
	`{"ints":[1,2.5]}`, `{"ints":[1,null]}`, `{"pints":[1,null]}`, `{"arr":[1,2,3]}`, `{"arr":{}}`,
	`{"raw":"aGk="}`, `{"raw":[1]}`, `{"raw":null}`, `{"b":1}`, `{"b":null}`, `{"pb":null}`, `{"b":false}`, `{"i":true}`,
	`{"any":{"a":1,"a":2}}`, `{"any":[{"a":"\ud800"}]}`, `{"any":null}`, `{"m":{"x":[{"sku":"a","SKU":"b"}]}}`,
	`{"nest":{"nest":{"nest":{"i":"x"}}}}`, `{"nest":{"i":1},"nest":{}}`, `{"t":"2026-12-02T14:00:00Z","pt":null}`, `{"t":null}`,
	`{"Kind":"paid"}`, `{"kind":"paid"}`, `{"rm":[1,{"x":{"y":[{"x":1,"x":2}]}}]}`,
	`{"order_no":"a\/b\u0000c\"\\\b\f\n\r\t"}`,
	" \t\r\n{ \t\r\n\"amount\" \t\r\n: \t\r\n1 \t\r\n, \"items\" : [ { \"sku\" : \"a\" } , { } ] \t\r\n} \t\r\n",
	`{}`, `{} `, ` {}`, `{`, `}`, `{"a"}`, `{"amount":}`, `{"amount":1 2}`, `{"amount":01}`, `{"amount":1.}`,
	`"x"`, `1`, `null`, `[]`, `true`, ` `, "\n", `[1,}`, `{"amount":1,"amount":2,}`, `{"amount":1,"Amount":2`,
	`{"amount":1}}`, `{"amount":1}]`, `{"amount":1} {`, `{"metadata":{"a":1,"a":2}} x`,
	"{\"coupon\":\"\x01\"}", "{\"coupon\":\"\\x\"}", `{"coupon":"\u12"}`,
	objectOfKeys(20, -1), objectOfKeys(20, 3), objectOfKeys(20, 17), objectOfKeys(20, 19), objectOfKeys(17, 16), objectOfKeys(16, 15), objectOfKeys(40, 39),
	nested(`{"metadata":`, `{"a":`, `1`, `}`, `}`, maxDepth-2),
	nested(`{"metadata":`, `{"a":`, `1`, `}`, `}`, maxDepth-1),
	nested(`{"metadata":`, `{"a":`, `1`, `}`, `}`, maxDepth),
	nested(`{"metadata":`, `[`, `1`, `]`, `}`, maxDepth-1),
	nested(`{"metadata":`, `[`, `1`, `]`, `}`, maxDepth),
	nested(`{"items":[`, `{"sku":"a","qty":1},`, `1`, `]`, `]}`, 3),
	nested(`{"any":`, `[{"a":1},`, `null`, `]`, `}`, 50),
}

// objectOfKeys is an object of n keys in metadata, its key number dup
// repeating key 0 (none when dup is negative).
func objectOfKeys(n, dup int) string {
	var b strings.Builder
	b.WriteString(`{"metadata":{`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		k := i
		if i == dup {
			k = 0
		}
		b.WriteString(`"k` + string(rune('a'+k%26)) + string(rune('a'+k/26)) + `":{"k":1,"kaa":2}`)
	}
	b.WriteString(`},"metadata":1}`)
	return b.String()
}

// nested is head, open n times, middle, end n times, then tail.
func nested(head, open, middle, end, tail string, n int) string {
	return head + strings.Repeat(open, n) + middle + strings.Repeat(end, n) + tail
}

// agree fails t unless walk's check and tokenWalker's agree on body: both
// accept it, or both refuse it with the same error.
func agree(t *testing.T, body []byte) {
	t.Helper()
	for _, typ := range diffTypes {
		for _, strict := range []bool{true, false} {
			got := check(body, typ, strict)
			want := walkTokens(body, typ, strict)
			if (got == nil) != (want == nil) {
				t.Fatalf("%v (strict %v) %q: check %v, the token walk %v", typ, strict, body, got, want)
			}
			if got == nil {
				continue
			}
			g, ok := got.(*lapse.Error)
			w, _ := want.(*lapse.Error)
			if !ok || w == nil || g.Code != w.Code || g.Field != w.Field || g.Message != w.Message {
				t.Fatalf("%v (strict %v) %q:\n check:          %#v\n the token walk: %#v", typ, strict, body, got, want)
			}
		}
	}
}

func TestWalkAgrees(t *testing.T) {
	for _, body := range diffSeeds {
		agree(t, []byte(body))
	}
}

// FuzzDiff checks that walk refuses exactly what tokenWalker, the reading
// it replaced, refuses, naming the same field with the same message.
func FuzzDiff(f *testing.F) {
	for _, body := range diffSeeds {
		if len(body) < 1000 {
			f.Add([]byte(body))
		}
	}
	f.Fuzz(agree)
}
