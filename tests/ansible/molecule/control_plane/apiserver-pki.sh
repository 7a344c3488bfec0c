#!/bin/sh
# A minimal API server's keys for the control_plane scenario: a cluster CA, the serving
# certificate, the service-account key pair and an admin client certificate (system:masters),
# plus /etc/kubernetes/admin.conf the way kubeadm writes it.
set -eu
pki=/etc/kubernetes/pki
mkdir -p "$pki"
cd "$pki"
[ -f ca.crt ] || openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 \
  -subj /CN=kubernetes 2>/dev/null
if [ ! -f apiserver.crt ]; then
  openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
    -subj /CN=kube-apiserver 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' >san.ext
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
    -extfile san.ext -out apiserver.crt 2>/dev/null
fi
[ -f sa.key ] || { openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null; }
if [ ! -f admin.crt ]; then
  openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr \
    -subj "/O=system:masters/CN=kubernetes-admin" 2>/dev/null
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -out admin.crt 2>/dev/null
fi
b64() { base64 -w0 "$1"; }
cat >/etc/kubernetes/admin.conf <<CONF
apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: $(b64 ca.crt)
users:
- name: kubernetes-admin
  user:
    client-certificate-data: $(b64 admin.crt)
    client-key-data: $(b64 admin.key)
contexts:
- name: kubernetes-admin@kubernetes
  context: {cluster: kubernetes, user: kubernetes-admin}
current-context: kubernetes-admin@kubernetes
CONF
chmod 600 /etc/kubernetes/admin.conf
