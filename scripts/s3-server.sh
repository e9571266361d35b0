#!/usr/bin/env bash
# A real S3 server on this machine, for the tests and for trying shardsafe
# with s3:// paths: Ceph radosgw (Debian 12's ceph 16) on a one-node
# cluster -- one monitor, one in-memory OSD (memstore: nothing touches the
# disk but logs), no manager, cluster auth off, S3 with SigV4 on
# 127.0.0.1 only.  Everything lives in one state directory, $SHS_S3_DIR
# (default /tmp/shardsafe-s3); `stop` removes it, so the data goes too.
#
#   scripts/s3-server.sh start    start (idempotent), wait until a signed
#                                 request succeeds, print the endpoint
#   scripts/s3-server.sh stop     stop the daemons this script started
#   scripts/s3-server.sh status   0 when running and answering, else 1
#   scripts/s3-server.sh env      print the AWS_* exports for it:
#                                 eval "$(scripts/s3-server.sh env)"
#
# Packages: ceph-mon ceph-osd radosgw ceph-common (scripts/setup.sh).
# Runs as root (the daemons then stay root: no --setuser) or as any user
# who can write the state directory.  Facts measured with ceph 16.2.15:
# radosgw loops on an authentication error unless ms_mon_client_mode is
# crc; ceph-osd --mkfs needs its data directory to exist.
set -euo pipefail

dir=${SHS_S3_DIR:-/tmp/shardsafe-s3}
access_key=SHSTESTACCESSKEY0001
# a test server's key, on 127.0.0.1 only: not a secret
secret_key=shs-test-secret-0000000000000000000000001
region=us-east-1
py=/usr/bin/python3
[[ -x $py ]] || py=python3

log() { echo "s3-server: $*" >&2; }
die() {
  log "$*"
  exit 1
}

free_port() {
  "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

endpoint() { cat "$dir/endpoint" 2>/dev/null; }

# Any HTTP answer from radosgw means the frontend is up; a signed
# ListBuckets answered 200 means the user exists and signing works.
answers() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 \
    --aws-sigv4 "aws:amz:$region:s3" --user "$access_key:$secret_key" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$(endpoint)/" 2>/dev/null) || true
  [[ $code == 200 ]]
}

running() {
  [[ -f $dir/endpoint ]] || return 1
  for d in mon.a osd.0 client.rgw; do
    pid_alive "$dir/run/$d.pid" || return 1
  done
  answers
}

stop() {
  local d pid
  [[ -d $dir ]] || return 0
  # radosgw first, the OSD, then the monitor; only the pids this script
  # recorded, never processes found by name
  for d in client.rgw osd.0 mon.a; do
    if pid_alive "$dir/run/$d.pid"; then
      pid=$(cat "$dir/run/$d.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  case $dir in
  / | "") die "refusing to remove state directory '$dir'" ;;
  esac
  rm -rf "$dir"
}

write_conf() {
  local fsid=$1 mon_port=$2 rgw_port=$3
  cat >"$dir/ceph.conf" <<EOF
[global]
fsid = $fsid
mon_host = v2:127.0.0.1:$mon_port
public_addr = 127.0.0.1
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
ms_mon_client_mode = crc
osd_objectstore = memstore
# a limit, not an allocation: memory is used as objects are stored.  A
# full OSD makes radosgw wait forever, hence the room and the quick
# garbage collection below (deleted and overwritten objects are freed by
# radosgw's GC, after 2 hours by default)
memstore_device_bytes = 12884901888
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_data_avail_warn = 2
mon_data_avail_crit = 1
osd_crush_chooseleaf_type = 0
run_dir = $dir/run
log_file = $dir/log/\$name.log
admin_socket = $dir/run/\$name.asok
pid_file = $dir/run/\$name.pid
keyring = $dir/keyring
crash_dir = $dir/crash
log_to_stderr = false
err_to_stderr = false
[mon]
mon_data = $dir/mon
[osd]
osd_data = $dir/osd
osd_max_object_name_len = 256
osd_max_object_namespace_len = 64
[client.rgw]
rgw_frontends = beast endpoint=127.0.0.1:$rgw_port
rgw_data = $dir/rgw
# small parts are legal here so that the multipart tests move little data
# (AWS wants 5 MiB except for the last part)
rgw_multipart_min_part_size = 65536
rgw_enable_usage_log = false
rgw_gc_obj_min_wait = 1
rgw_gc_processor_period = 5
rgw_gc_processor_max_time = 5
EOF
}

start() {
  if running; then
    log "running at $(endpoint) (state in $dir)"
    return 0
  fi
  for b in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph-authtool ceph curl; do
    command -v "$b" >/dev/null || die "$b not found: run scripts/setup.sh (packages ceph-mon ceph-osd radosgw ceph-common curl)"
  done
  stop # a half-started or dead server: start afresh
  mkdir -p "$dir"/{run,log,mon,osd,rgw,crash}
  local fsid mon_port rgw_port c t0=$SECONDS
  fsid=$(cat /proc/sys/kernel/random/uuid)
  mon_port=$(free_port)
  rgw_port=$(free_port)
  [[ $mon_port != "$rgw_port" ]] || rgw_port=$(free_port)
  write_conf "$fsid" "$mon_port" "$rgw_port"
  c=(-c "$dir/ceph.conf")
  # the monitor: a map naming itself, a keyring it insists on even with
  # auth off
  monmaptool --create --addv a "[v2:127.0.0.1:$mon_port]" --fsid "$fsid" "$dir/monmap" >/dev/null
  ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-mon "${c[@]}" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring" \
    >>"$dir/log/setup.log" 2>&1 || die "ceph-mon --mkfs failed: see $dir/log/setup.log"
  ceph-mon "${c[@]}" -i a >>"$dir/log/setup.log" 2>&1 || die "ceph-mon failed to start: see $dir/log/"
  # the OSD: its id from the monitor, then its (in-memory) store
  timeout 30 ceph "${c[@]}" --connect-timeout 20 osd create >>"$dir/log/setup.log" 2>&1 ||
    die "the monitor does not answer: see $dir/log/mon.a.log"
  ceph-osd "${c[@]}" -i 0 --mkfs >>"$dir/log/setup.log" 2>&1 || die "ceph-osd --mkfs failed: see $dir/log/setup.log"
  ceph-osd "${c[@]}" -i 0 >>"$dir/log/setup.log" 2>&1 || die "ceph-osd failed to start: see $dir/log/"
  radosgw "${c[@]}" -n client.rgw >>"$dir/log/setup.log" 2>&1 || die "radosgw failed to start: see $dir/log/"
  echo "http://127.0.0.1:$rgw_port" >"$dir/endpoint"
  # radosgw creates its pools once the OSD is up, then answers
  local deadline=$((SECONDS + 90)) user_ok=0
  while ((SECONDS < deadline)); do
    if ((!user_ok)) && curl -s -o /dev/null --max-time 2 "$(endpoint)/" 2>/dev/null; then
      radosgw-admin "${c[@]}" -n client.admin --admin-socket= user create --uid=shardsafe \
        --display-name=shardsafe --access-key="$access_key" --secret-key="$secret_key" \
        >>"$dir/log/setup.log" 2>&1 && user_ok=1
    fi
    if ((user_ok)) && answers; then
      write_env
      log "running at $(endpoint) after $((SECONDS - t0)) s (state in $dir)"
      return 0
    fi
    for d in mon.a osd.0 client.rgw; do
      pid_alive "$dir/run/$d.pid" || die "$d died while starting: see $dir/log/$d.log"
    done
    sleep 0.5
  done
  die "radosgw did not answer within 90 s: see $dir/log/"
}

write_env() {
  cat >"$dir/env" <<EOF
export AWS_ENDPOINT_URL=$(endpoint)
export AWS_REGION=$region
export AWS_ACCESS_KEY_ID=$access_key
export AWS_SECRET_ACCESS_KEY=$secret_key
EOF
}

case ${1:-} in
start) start ;;
stop) stop ;;
status)
  if running; then
    echo "running at $(endpoint) (state in $dir)"
  else
    echo "not running"
    exit 1
  fi
  ;;
env)
  running || die "not running: scripts/s3-server.sh start"
  cat "$dir/env"
  ;;
*)
  echo "usage: $0 start|stop|status|env   (state directory \$SHS_S3_DIR, default /tmp/shardsafe-s3)" >&2
  exit 2
  ;;
esac
