"""Assets by stage: ingestion -> encoding -> training -> pool -> evaluation -> analyses."""
