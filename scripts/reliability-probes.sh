#!/usr/bin/env bash
# The probes of docs/reliability.md ("Probes and outcomes"), as a user would try them:
# checkpoints written through links and onto what is not a file, kills during saves,
# damaged and crafted checkpoints, hostile flag values and variables, broken data sets, a
# cap that cannot fit. Prints one Markdown table row per probe: what was tried, the exit
# status, and the first line of what the program said (or the effect on the file).
#   scripts/reliability-probes.sh BUILD_DIR [DATA_DIR]
# BUILD_DIR holds examples/ember_mlp, examples/ember_cnn and tools/ember-run (or the three
# programs side by side). Needs /usr/bin/python3 (standard library only), root for the
# device-node probe, and setpriv for the permission probe (run as nobody). Takes a minute.
set -uo pipefail
build=$(cd "$1" && pwd)
data=${2:-/usr/share/datasets/fashion-mnist}
bin() { if [ -x "$build/$1" ]; then echo "$build/$1"; else echo "$build/$(basename "$1")"; fi; }
mlp=$(bin examples/ember_mlp) cnn=$(bin examples/ember_cnn) run=$(bin tools/ember-run)
py=/usr/bin/python3
work=$(mktemp -d)
trap 'chmod -R u+rwx "$work"; rm -rf "$work"' EXIT
cd "$work"
L="--device cpu --limit-train 256 --limit-test 256"
A="$L --data $data"

# One row: the probe, the exit status, what the program said (first error line, else last line).
row() {
  local what=$1; shift
  timeout -s KILL 60 "$@" >out.txt 2>err.txt
  local rc=$? said
  said=$(grep -m1 -E 'error|terminate|what\(\)|warning|verdict|Could not|Value|outside|not a|must' err.txt out.txt -h)
  [ -n "$said" ] || said=$(tail -n1 out.txt)
  [ $rc -ge 128 ] && said="$(grep -h -m2 -E 'terminate|what' err.txt | tr '\n' ' ')"
  printf '| %s | %s | %s |\n' "$what" "$rc" "$(echo "$said" | cut -c1-150 | sed 's/|/\\|/g')"
}
note() { printf '| %s | | %s |\n' "$1" "$2"; }

# Edits a safetensors file to the spec: meta KEY VALUE|--del, flip TENSOR BYTE MASK, nan TENSOR (checksum rewritten).
cat >st_edit.py <<'EOF'
import json, struct, sys
path, op = sys.argv[1], sys.argv[2]
b = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
def crc32c(d):
    t = []
    for x in range(256):
        c = x
        for _ in range(8): c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t.append(c)
    c = 0xFFFFFFFF
    for x in d: c = (c >> 8) ^ t[(c ^ x) & 0xFF]
    return c ^ 0xFFFFFFFF
if op == "meta":
    m = h.setdefault("__metadata__", {})
    if sys.argv[4] == "--del": m.pop(sys.argv[3], None)
    else: m[sys.argv[3]] = sys.argv[4]
elif op == "flip":
    data[h[sys.argv[3]]["data_offsets"][0] + int(sys.argv[4])] ^= int(sys.argv[5], 0)
elif op == "nan":
    b0, b1 = h[sys.argv[3]]["data_offsets"]
    data[b0:b0 + 4] = struct.pack("<f", float("nan"))
    if "crc32c:" + sys.argv[3] in h.get("__metadata__", {}):
        h["__metadata__"]["crc32c:" + sys.argv[3]] = "%08x" % crc32c(data[b0:b1])
hb = json.dumps(h).encode(); hb += b" " * ((8 - len(hb) % 8) % 8)
open(path, "wb").write(struct.pack("<Q", len(hb)) + hb + data)
EOF

# Starts PROGRAM N times, sends SIG when a file of DIR is open in it (a save under way).
cat >kill_midsave.py <<'EOF'
import os, signal, subprocess, sys, time
n, sig, d, cmd = int(sys.argv[1]), getattr(signal, sys.argv[2]), sys.argv[3], sys.argv[4:]
hits = 0
for i in range(n):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while time.time() - t0 < 60 and p.poll() is None:
        try:
            fds = [os.readlink(f"/proc/{p.pid}/fd/{f}") for f in os.listdir(f"/proc/{p.pid}/fd")]
        except OSError:
            continue
        if any(f.startswith(d) for f in fds):
            p.send_signal(sig); hits += 1; break
    if p.poll() is None and sig != signal.SIGKILL:
        time.sleep(0.5)
    p.kill(); p.wait()
left = [x for x in os.listdir(d) if x != "ck.safetensors"]
size = sum(os.path.getsize(os.path.join(d, x)) for x in left)
print(f"{hits} of {n} signals landed during a save; {len(left)} other files ({size / 1e6:.0f} MB) left")
EOF

echo "| probe | exit | what it said, or what happened |"
echo "|---|---|---|"
"$mlp" $A --save ck.safetensors >/dev/null 2>&1

# Checkpoint files.
mkdir -p real && cp ck.safetensors real/target.safetensors && ln -s real/target.safetensors link.safetensors
before=$(md5sum <real/target.safetensors)
"$mlp" $A --epochs 2 --resume link.safetensors --save link.safetensors >/dev/null 2>&1
note "--save through a symlink" "$( [ -L link.safetensors ] && echo 'the link stays a link' || echo 'the link became a regular file'); $( [ "$(md5sum <real/target.safetensors)" != "$before" ] && echo 'its target was updated' || echo 'its target kept the old contents')"
cp ck.safetensors m.safetensors && chmod 600 m.safetensors
"$mlp" $A --save m.safetensors >/dev/null 2>&1
note "--save over a 0600 checkpoint" "mode after: $(stat -c %a m.safetensors)"
if [ "$(id -u)" = 0 ] && mknod nulldev c 1 3 2>/dev/null; then
  row "--save onto a character device (a copy of /dev/null), as root" "$mlp" $A --save nulldev
  note "... the device node afterwards" "$(stat -c %F nulldev)"
fi
mkfifo fifo
row "--save onto a FIFO" "$mlp" $A --save fifo
mkdir -p kills && cp ck.safetensors kills/  # each run's first save is interrupted: the old file must stay
note "kill -9 when a save is under way, 20 times" "$($py kill_midsave.py 20 SIGKILL "$work/kills" "$mlp" $A --epochs 200 --save "$work/kills/ck.safetensors")"
rm -rf kills; mkdir -p kills && cp ck.safetensors kills/
note "SIGTERM when a save is under way, 10 times" "$($py kill_midsave.py 10 SIGTERM "$work/kills" "$mlp" $A --epochs 200 --save "$work/kills/ck.safetensors")"
row "... then --resume from what is left" "$mlp" $A --epochs 300 --resume kills/ck.safetensors

# Damaged and crafted checkpoints.
row "--resume on a directory" "$mlp" $A --resume "$work"
for v in --del abc 99999999999999999999 -5; do
  cp ck.safetensors e.safetensors && $py st_edit.py e.safetensors meta epoch "$v"
  row "--resume, epoch tag: ${v/--del/missing}" "$mlp" $A --epochs 2 --resume e.safetensors
done
cp ck.safetensors f.safetensors && $py st_edit.py f.safetensors flip model.1.weight 1000 0x40
row "--resume, one flipped byte in a weight" "$mlp" $A --epochs 2 --resume f.safetensors
cp ck.safetensors g.safetensors && $py st_edit.py g.safetensors flip optimizer.state.0.exp_avg_sq 403 0x80
row "--resume, a flipped sign bit in an Adam state value" "$mlp" $A --epochs 2 --resume g.safetensors
cp ck.safetensors h.safetensors && $py st_edit.py h.safetensors nan optimizer.state.0.exp_avg
row "--resume, a NaN in Adam's state, checksum rewritten" "$mlp" $A --epochs 2 --resume h.safetensors

# Flags and variables.
row "--threads 99999" "$mlp" $A --threads 99999
row "EMBER_NUM_THREADS=99999" env EMBER_NUM_THREADS=99999 "$mlp" $A
for v in 0 -3 1000; do row "--threads $v" "$mlp" $A --threads $v; done
for v in 0 -5; do row "--limit-train $v" "$mlp" --device cpu --data "$data" --limit-test 64 --limit-train $v --epochs 0; done
row "--seed -1" "$mlp" $A --seed -1
row "--seed 18446744073709551617" "$mlp" $A --seed 18446744073709551617
row "--lr 1e308" "$mlp" $A --lr 1e308
row "--optimizer sgd --lr 1000 (the loss becomes NaN)" "$mlp" $A --optimizer sgd --lr 1000 --batch-size 8
row "--memory-snapshot-steps -1" "$mlp" $A --memory-snapshot snap.json --memory-snapshot-steps -1
row "--epochs 99999999999" "$mlp" $A --epochs 99999999999
row "EMBER_HOST_MEMORY_LIMIT=0" env EMBER_HOST_MEMORY_LIMIT=0 "$mlp" $A
row "ember-run --nproc-per-node 2147483647" "$run" --nproc-per-node 2147483647 /bin/true
row "ember-run, 4 ranks x EMBER_NUM_THREADS=2 on $(nproc) cores" env EMBER_NUM_THREADS=2 "$run" --nproc-per-node 4 /bin/true

# Rendezvous: a stranger with the job's port and run id but not its secret, started as
# rank 1 before the job's rank 1; then two ember-run jobs started at once on one port.
port=$($py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
job="env RANK=0 WORLD_SIZE=2 MASTER_PORT=$port EMBER_RUN_ID=probe EMBER_JOB_SECRET=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
$job "$mlp" $A --json >rank0.txt 2>&1 &
rank0=$!
row "a stranger as rank 1 (the job's port and run id, no secret)" env -u EMBER_JOB_SECRET RANK=1 WORLD_SIZE=2 MASTER_PORT=$port EMBER_RUN_ID=probe "$mlp" $A
row "... with a wrong secret" env RANK=1 WORLD_SIZE=2 MASTER_PORT=$port EMBER_RUN_ID=probe EMBER_JOB_SECRET=a-wrong-secret-0123456789 "$mlp" $A
${job/RANK=0/RANK=1} "$mlp" $A >/dev/null 2>&1
wait $rank0
note "... the job, when its rank 1 came" "exit $?: $(grep -o '"world_size":[0-9]*' rank0.txt), $(grep -c 'refused a connection' rank0.txt) refusals logged by rank 0"
one=0
for i in 1 2 3 4 5; do
  port=$($py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$run" --nproc-per-node 2 --master-port $port "$mlp" $A >race1.txt 2>&1 & r1=$!
  "$run" --nproc-per-node 2 --master-port $port "$mlp" $A >race2.txt 2>&1 & r2=$!
  wait $r1; c1=$?; wait $r2; c2=$?
  [ $(( (c1 == 0) + (c2 == 0) )) = 1 ] && one=$((one + 1))
done
note "two ember-run jobs started at once on one port, 5 times" "exactly one ran in $one of 5; the other said: $(grep -h -m1 -o 'TcpStore: [^(]*' race1.txt race2.txt | head -n1)"

# Data sets.
mkdir -p noperm && chmod 000 noperm
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  row "--data on a folder without search permission (as nobody)" setpriv --reuid=65534 --regid=65534 --clear-groups "$mlp" $L --data "$work/noperm"
fi
ln -s loop1 loop2 && ln -s loop2 loop1
row "--data on a symlink loop" "$mlp" $L --data "$work/loop1"
mkdir -p baddims badlabels
$py - "$data" <<'EOF'
import gzip, os, shutil, struct, sys
src = sys.argv[1]
def read(name):
    p = os.path.join(src, name)
    return bytearray(gzip.open(p + ".gz").read() if os.path.exists(p + ".gz") else open(p, "rb").read())
for d in ("baddims", "badlabels"):
    for f in ("train-labels-idx1-ubyte", "t10k-labels-idx1-ubyte", "train-images-idx3-ubyte", "t10k-images-idx3-ubyte"):
        open(f"{d}/{f}", "wb").write(read(f))
for f in ("train-images-idx3-ubyte", "t10k-images-idx3-ubyte"):
    b = read(f); b[8:16] = struct.pack(">II", 14, 56); open("baddims/" + f, "wb").write(b)
b = read("t10k-labels-idx1-ubyte"); b[8 + 100] = 12; open("badlabels/t10k-labels-idx1-ubyte", "wb").write(b)
EOF
row "IDX images declared 14 x 56 (the MLP)" "$mlp" $L --data "$work/baddims"
row "IDX images declared 14 x 56 (the CNN)" "$cnn" $L --data "$work/baddims"
row "a test label 12 (of 10 classes)" "$mlp" $L --data "$work/badlabels"

# Out-of-memory advice.
oom() {  # the report's verdict and the start of its advice
  note "... its verdict and advice" "$(grep -h -m1 '^verdict' err.txt); $(grep -h -m1 '^advice' err.txt | cut -c1-260 | sed 's/|/\\|/g')"
}
row "ember_cnn --max-memory 1B" "$cnn" $A --max-memory 1B
oom
row "... following the advice max_split_size_mb:21" env EMBER_ALLOC_CONF=max_split_size_mb:21 "$cnn" $A --max-memory 1B
oom
