#!/usr/bin/env node
// KafkaJS over SASL_SSL: `node kafkajs_security.js BOOTSTRAP CA_PEM MECHANISM USER PASSWORD TOPIC DENIED_TOPIC`
// (NODE_PATH=compat_tests/js/node_modules). Produces to TOPIC, reads it back in a group, then produces
// to DENIED_TOPIC; prints one JSON line: {"ok", "consumed", "denied": <KafkaJS error type>}.
'use strict'

const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, caPath, mechanism, username, password, topic, deniedTopic] = process.argv.slice(2)
const kafka = new Kafka({
  clientId: 'security-kafkajs',
  brokers: [bootstrap],
  ssl: { ca: [fs.readFileSync(caPath, 'utf-8')], servername: 'localhost' },
  sasl: { mechanism: mechanism.toLowerCase(), username, password },
  logLevel: logLevel.NOTHING,
  connectionTimeout: 5000,
  requestTimeout: 15000,
  retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 1000 },
})

async function main() {
  const producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic, messages: [{ value: 'from-kafkajs' }] })
  let denied = null
  try {
    await producer.send({ topic: deniedTopic, messages: [{ value: 'nope' }] })
  } catch (e) {
    denied = e.type || (e.cause && e.cause.type) || e.name
  }
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: `${username}-kafkajs` })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const consumed = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('nothing consumed in 20 s')), 20000)
    consumer.run({
      eachMessage: async ({ message }) => {
        clearTimeout(timer)
        resolve(message.value.toString())
      },
    })
  })
  await consumer.disconnect()
  console.log(JSON.stringify({ ok: true, consumed, denied }))
}

main().catch(e => {
  console.log(JSON.stringify({ ok: false, error: String(e), type: e.type }))
  process.exit(1)
})
